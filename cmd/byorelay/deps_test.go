package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The operator's build links no test code: `byorelay admin` is pointed at
// production, and a binary that carries the local stack, the demo world's
// key handling and the test harnesses is one whose every flag and default
// must be audited as if it were production code. Test scaffolding is the
// standard library's testing packages and net/http/httptest, and any
// package of this module under localtest or named for a test suite
// (relaytest, storetest, sitestoretest, ...). cmd/byorelay-local is where
// the commands that need it live.
func TestTheOperatorBuildLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed %d packages: %q", len(deps), out)
	}
	for _, p := range deps {
		if testScaffolding(p) {
			t.Errorf("the operator build links %s", p)
		}
	}
}

const module = "github.com/byorelay/byorelay"

func testScaffolding(pkg string) bool {
	if pkg == "testing" || strings.HasPrefix(pkg, "testing/") || pkg == "net/http/httptest" {
		return true
	}
	if pkg != module && !strings.HasPrefix(pkg, module+"/") {
		return false
	}
	for _, elem := range strings.Split(strings.TrimPrefix(pkg, module), "/") {
		if elem == "localtest" || strings.HasSuffix(elem, "test") {
			return true
		}
	}
	return false
}

// The check itself names what it must.
func TestTestScaffoldingNamesTheTestPackages(t *testing.T) {
	for pkg, want := range map[string]bool{
		"testing":                                    true,
		"testing/fstest":                             true,
		"net/http/httptest":                          true,
		module + "/localtest":                        true,
		module + "/localtest/demo":                   true,
		module + "/internal/relay/relaytest":         true,
		module + "/store/storetest":                  true,
		module + "/internal/sitestore/sitestoretest": true,
		module + "/internal/controlplane/admincli":   false,
		module + "/cmd/internal/localstack":          false,
		module:                                       false,
		"internal/synctest":                          false,
		"net/http":                                   false,
	} {
		if got := testScaffolding(pkg); got != want {
			t.Errorf("testScaffolding(%q) = %v, want %v", pkg, got, want)
		}
	}
}
