package byorelay_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
)

// lambdaArchitecture is the Lambda name of each GOARCH a function can be
// built for.
var lambdaArchitecture = map[string]string{"arm64": "arm64", "amd64": "x86_64"}

// The functions are deployed on the architecture they are built for: both
// templates run every function on their Architecture parameter, which
// takes each Lambda architecture and defaults to the one the Makefile's
// LAMBDA_ARCH (the GOARCH build-lambdas and sam build's build-<LogicalId>
// compile for) defaults to. A bootstrap built for the other one fails its
// first invocation with an exec format error.
func TestLambdaArchMatchesTheTemplates(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LAMBDA_ARCH \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no default LAMBDA_ARCH")
	}
	want, ok := lambdaArchitecture[string(m[1])]
	if !ok {
		t.Fatalf("LAMBDA_ARCH defaults to %q, not a GOARCH Lambda runs (arm64, amd64)", m[1])
	}
	for name, src := range map[string][]byte{"template.yaml": byorelay.Template, "site-template.yaml": byorelay.SiteTemplate} {
		var doc yaml.Node
		if err := yaml.Unmarshal(src, &doc); err != nil {
			t.Fatal(err)
		}
		root := doc.Content[0]
		param := at(root, "Parameters", "Architecture")
		if param == nil {
			t.Errorf("%s has no Architecture parameter", name)
			continue
		}
		if d := at(param, "Default"); d == nil || d.Value != want {
			t.Errorf("%s: Architecture defaults to %v, want %s (LAMBDA_ARCH %s)", name, d, want, m[1])
		}
		var allowed []string
		if a := at(param, "AllowedValues"); a != nil {
			for _, v := range a.Content {
				allowed = append(allowed, v.Value)
			}
		}
		slices.Sort(allowed)
		if !slices.Equal(allowed, []string{"arm64", "x86_64"}) {
			t.Errorf("%s: Architecture allows %v, want [arm64 x86_64]", name, allowed)
		}
		a := at(root, "Globals", "Function", "Architectures")
		if a == nil || len(a.Content) != 1 || a.Content[0].Tag != "!Ref" || a.Content[0].Value != "Architecture" {
			t.Errorf("%s: Globals.Function.Architectures is not [!Ref Architecture]", name)
		}
		resources := at(root, "Resources")
		for i := 0; i+1 < len(resources.Content); i += 2 {
			if a := at(resources.Content[i+1], "Properties", "Architectures"); a != nil {
				t.Errorf("%s: %s sets its own Architectures; every function is built for LAMBDA_ARCH", name, resources.Content[i].Value)
			}
		}
	}
}

// make deploy deploys on the architecture LAMBDA_ARCH built for: it passes
// the templates' Architecture parameter, under Lambda's name for the GOARCH.
func TestMakeDeployPassesTheArchitecture(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here to read make deploy's commands")
	}
	for goarch, arch := range lambdaArchitecture {
		out, err := exec.Command("make", "--no-print-directory", "-n", "deploy", "LAMBDA_ARCH="+goarch).Output()
		if err != nil {
			t.Fatalf("make -n deploy LAMBDA_ARCH=%s: %v", goarch, err)
		}
		deploy := regexp.MustCompile(`(?m)sam deploy .*$`).FindString(string(out))
		if !regexp.MustCompile(`--parameter-overrides (\S+ )*Architecture=` + arch + `( |$)`).MatchString(deploy) {
			t.Errorf("LAMBDA_ARCH=%s: make deploy runs %q, want it to pass Architecture=%s", goarch, strings.TrimSpace(string(out)), arch)
		}
	}
	if err := exec.Command("make", "--no-print-directory", "-n", "deploy", "LAMBDA_ARCH=386").Run(); err == nil {
		t.Error("make deploy accepted LAMBDA_ARCH=386, which no Lambda runs")
	}
}
