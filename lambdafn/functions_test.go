package lambdafn

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	byorelay "github.com/byorelay/byorelay"
)

// Every function in the registry has its main.go, its sample event and its
// resource in template.yaml, and every HTTP route the registry names is
// declared there: the four cannot drift apart.
func TestEveryFunctionHasItsDirectoryEventAndTemplateResource(t *testing.T) {
	tpl := string(byorelay.Template)
	for _, f := range Functions() {
		if _, err := os.Stat(filepath.Join("..", "functions", f.Name, "main.go")); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
		if _, err := os.Stat(filepath.Join("..", "events", f.Name+".json")); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
		if !strings.Contains(tpl, "\n  "+f.LogicalID+":\n") {
			t.Errorf("%s: template.yaml has no resource %s", f.Name, f.LogicalID)
		}
		for _, r := range f.Routes {
			if r == "$default" {
				continue
			}
			path := strings.TrimPrefix(r, "ANY ")
			if !strings.Contains(tpl, "Path: "+path+"\n") {
				t.Errorf("%s: template.yaml declares no route %s", f.Name, path)
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join("..", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	// functions/site* are the site stack's (site-template.yaml, sitefn's
	// registry), not the relay's.
	relayDirs := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "site") {
			relayDirs++
		}
	}
	if relayDirs != len(Functions()) {
		t.Errorf("functions/ has %d relay directories, the registry %d", relayDirs, len(Functions()))
	}
}

func TestLookupFindsByShortName(t *testing.T) {
	f, err := Lookup("catchall")
	if err != nil || f.LogicalID != "CatchAllFunction" {
		t.Fatalf("catchall = %+v, %v", f, err)
	}
	if _, err := Lookup("nope"); err == nil {
		t.Fatal("want an error for an unknown function")
	}
}

// TestNoFunctionLinksDeveloperTooling: what only tests and local runs need
// (a YAML parser, the embedded templates, localtest) is linked into no
// deployed function, where it would only lengthen every cold start.
func TestNoFunctionLinksDeveloperTooling(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../functions/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "gopkg.in/yaml.v3" || pkg == "github.com/byorelay/byorelay" ||
			strings.HasPrefix(pkg, "github.com/byorelay/byorelay/localtest") {
			t.Errorf("a function links %s", pkg)
		}
	}
}
