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

// TestFunctionsLinkNoSDKClientTheyCallRarely: an SDK service package's
// initialisation (its schemas and endpoint table) runs at every cold start
// of every function that links it, called or not. So the services a
// function calls once in a while (SSM at start, SNS for a churn report,
// EventBridge Scheduler for a wake-up, S3 for an envelope too large to
// inline) are called through awscall, and the SDK's config loader (shared
// files, SSO, STS, IMDS) is not linked at all: the only service client a
// deployed function links is DynamoDB's (the store, and dynamodbstreams for
// attributevalue), with the two shared packages it uses.
func TestFunctionsLinkNoSDKClientTheyCallRarely(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../functions/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{"dynamodb": true, "dynamodbstreams": true, "internal/accept-encoding": true, "internal/endpoint-discovery": true}
	for _, pkg := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(pkg, "github.com/aws/aws-sdk-go-v2/service/"); ok {
			service, sub, _ := strings.Cut(rest, "/")
			if service == "internal" { // shared by clients: named by its own package
				shared, _, _ := strings.Cut(sub, "/")
				service += "/" + shared
			}
			if !allowed[service] {
				t.Errorf("a function links %s", pkg)
			}
		}
		if strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/config") {
			t.Errorf("a function links %s (the SDK's config loader: lambdafn/container reads Lambda's environment)", pkg)
		}
	}
}
