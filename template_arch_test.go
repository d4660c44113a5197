package byorelay_test

import (
	"os"
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
)

// lambdaArchitecture is the Lambda name of each GOARCH a function can be
// built for.
var lambdaArchitecture = map[string]string{"arm64": "arm64", "amd64": "x86_64"}

// The functions are built for the architecture they are deployed on: the
// Makefile's LAMBDA_ARCH (the GOARCH build-lambdas and sam build's
// build-<LogicalId> compile for) defaults to the one architecture both
// templates give every function. A bootstrap built for the other one fails
// its first invocation with an exec format error.
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
		var got []string
		if a := at(root, "Globals", "Function", "Architectures"); a != nil {
			for _, v := range a.Content {
				got = append(got, v.Value)
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: Globals.Function.Architectures is %v, want [%s] (LAMBDA_ARCH %s)", name, got, want, m[1])
		}
		resources := at(root, "Resources")
		for i := 0; i+1 < len(resources.Content); i += 2 {
			if a := at(resources.Content[i+1], "Properties", "Architectures"); a != nil {
				t.Errorf("%s: %s sets its own Architectures; every function is built for LAMBDA_ARCH", name, resources.Content[i].Value)
			}
		}
	}
}
