package lambdafn

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	byorelay "github.com/byorelay/byorelay"
)

// Every function in the registry has its main.go, its sample event and its
// resource in template.yaml, and every HTTP route the registry names is
// declared there: the four cannot drift apart.
func TestEveryFunctionHasADirectoryEventAndResource(t *testing.T) {
	tpl := string(byorelay.Template)
	for _, f := range Functions() {
		if _, err := os.Stat(filepath.Join("..", "..", "functions", f.Name, "main.go")); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "events", f.Name+".json")); err != nil {
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
	entries, err := os.ReadDir(filepath.Join("..", "..", "functions"))
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
	out, err := exec.Command("go", "list", "-deps", "../../functions/...").Output()
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

// TestFunctionsLinkTheSDKClientsOfServicesTheyCall: every AWS call a
// function makes goes through the SDK's own client for that service, which
// keeps addressing, signing, error decoding and retries right as the
// services change; a hand-written request would have to be kept right by
// hand. A client's package initialisation runs at every cold start of a
// function that links it, so a function links the clients of the services
// its stack calls and no others: a relay function (lambdafn.Stack)
// DynamoDB (the store), S3 (envelopes too large to inline), SNS (churn
// reports), SSM (the grant key and the origin secret), KMS (the grant key
// when KMS holds it) and EventBridge Scheduler (the claim's sweeper
// wake-ups); a site function (sitefn, which imports none of lambdafn's
// clients) DynamoDB, S3 (at-rest envelopes too large to inline), SSM
// (its keys), Lambda (the cloud lane's app starts its pump, and a pump its
// successor) and EventBridge Scheduler (the pump's wake-ups).
// dynamodbstreams comes with attributevalue, and the service/internal
// packages with the clients that use them. No function links the SDK's
// config loader (shared files, SSO, STS, IMDS, process credentials):
// internal/platform/container reads the configuration Lambda's environment gives.
func TestFunctionsLinkTheSDKClientsOfServicesTheyCall(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "../../functions/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	relay := "dynamodb dynamodbstreams kms s3 scheduler sns ssm"
	site := "dynamodb dynamodbstreams lambda s3 scheduler ssm"
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(Functions())+9 {
		t.Fatalf("go list named %d functions, want the registry's %d and the site stack's 9", len(lines), len(Functions()))
	}
	for _, line := range lines {
		fn, deps, _ := strings.Cut(line, " ")
		fn = strings.TrimPrefix(fn, "github.com/byorelay/byorelay/functions/")
		linked := map[string]bool{}
		for _, pkg := range strings.Fields(deps) {
			if rest, ok := strings.CutPrefix(pkg, "github.com/aws/aws-sdk-go-v2/service/"); ok {
				if service, _, _ := strings.Cut(rest, "/"); service != "internal" {
					linked[service] = true
				}
			}
			if strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/config") {
				t.Errorf("%s links %s (the SDK's config loader: internal/platform/container reads Lambda's environment)", fn, pkg)
			}
		}
		clients := slices.Sorted(maps.Keys(linked))
		want := relay
		if strings.HasPrefix(fn, "site") {
			want = site
		}
		if got := strings.Join(clients, " "); got != want {
			t.Errorf("%s links the clients of %s, want %s", fn, got, want)
		}
	}
}
