package byorelay_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every target a person can ask for says what it does in one `## target:
// text` line, which `make help` lists, and `make` with no target prints
// that list: a .PHONY target without one is missing from help, and a `##`
// line naming no target lists something make cannot run.
func TestEveryMakeTargetSaysWhatItDoes(t *testing.T) {
	data, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(data)
	var phony []string
	for _, m := range regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindAllStringSubmatch(mk, -1) {
		phony = append(phony, strings.Fields(m[1])...)
	}
	if len(phony) == 0 {
		t.Fatal("the Makefile has no .PHONY targets")
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^## ([^ :]+): \S`).FindAllStringSubmatch(mk, -1) {
		if slices.Contains(documented, m[1]) {
			t.Errorf("target %s has two ## lines", m[1])
		}
		documented = append(documented, m[1])
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).MatchString(mk) {
			t.Errorf("## %s: names no target of the Makefile", m[1])
		}
	}
	for _, target := range phony {
		if !slices.Contains(documented, target) {
			t.Errorf(".PHONY target %s has no `## %s: what it does` line, so make help does not list it", target, target)
		}
	}
	if len(documented) == 0 || documented[0] != "help" {
		t.Errorf("the first documented target is %v, want help", documented[:min(1, len(documented))])
	}

	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here to run make help")
	}
	help, err := exec.Command("make", "--no-print-directory", "-s", "help").Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	bare, err := exec.Command("make", "--no-print-directory", "-s").Output()
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	if string(bare) != string(help) {
		t.Errorf("make with no target printed\n%s\nwant make help's\n%s", bare, help)
	}
	lines := strings.Split(strings.TrimSuffix(string(help), "\n"), "\n")
	if len(lines) != 1+len(documented) {
		t.Fatalf("make help printed %d lines, want a usage line and one for each of %d targets:\n%s", len(lines), len(documented), help)
	}
	for i, target := range documented {
		if f := strings.Fields(lines[1+i]); len(f) < 2 || f[0] != target {
			t.Errorf("make help line %d is %q, want %s and what it does", 2+i, lines[1+i], target)
		}
	}
}

// make help's validate line names every template the target lints: a
// template left off the line reads as one nobody checks.
func TestValidateSaysWhichTemplatesItLints(t *testing.T) {
	data, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(data)
	help := regexp.MustCompile(`(?m)^## validate: (.*)$`).FindStringSubmatch(mk)
	recipe := regexp.MustCompile(`(?m)^validate:\n\tcfn-lint (.*)$`).FindStringSubmatch(mk)
	if help == nil || recipe == nil {
		t.Fatal("the Makefile has no validate target with a ## line and a cfn-lint recipe line")
	}
	for _, file := range strings.Fields(recipe[1]) {
		if !strings.Contains(help[1], file) {
			t.Errorf("validate lints %s, and its help line does not say so: %q", file, help[1])
		}
	}
}
