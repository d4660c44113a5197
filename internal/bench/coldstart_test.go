package bench

import (
	"context"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/localtest"
)

// Each cold start runs with the variables its template sets, Globals and
// the function's own, no more and no fewer (the values are local): a
// function measured without a variable it is deployed with would skip the
// init work that variable costs.
func TestColdStartEnvIsTheTemplates(t *testing.T) {
	envOf, err := coldStartEnv(context.Background(), localtest.DynamoEndpoint(t), localtest.MotoEndpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	check := func(template []byte, name, logicalID string) {
		t.Helper()
		var doc yaml.Node
		if err := yaml.Unmarshal(template, &doc); err != nil {
			t.Fatal(err)
		}
		root := doc.Content[0]
		want := variables(path(root, "Globals", "Function", "Environment", "Variables"))
		want = append(want, variables(path(root, "Resources", logicalID, "Properties", "Environment", "Variables"))...)
		// Set only behind an edge (DomainName), "" otherwise: the bench
		// measures the stack without one.
		want = slices.DeleteFunc(want, func(v string) bool { return v == "ORIGIN_SECRET_PARAMETER" })
		env, _ := envOf(name)
		var got []string
		for _, kv := range env {
			if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "AWS_") {
				got = append(got, k)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the cold start sets %v, the template %v", name, got, want)
		}
	}
	for _, f := range lambdafn.Functions() {
		check(byorelay.Template, f.Name, f.LogicalID)
	}
	for _, f := range sitefn.Functions() {
		check(byorelay.SiteTemplate, f.Name, f.LogicalID)
		// The table's label says which functions read a key on their
		// first request: those that do, and only those.
		if _, reads := envOf(f.Name); (reads != "") != f.ReadsKeys() {
			t.Errorf("%s: labelled %q, but ReadsKeys is %v", f.Name, reads, f.ReadsKeys())
		}
	}
}

func path(node *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if node == nil || node.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == k {
				next = node.Content[i+1]
			}
		}
		node = next
	}
	return node
}

func variables(node *yaml.Node) []string {
	var names []string
	if node != nil && node.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(node.Content); i += 2 {
			names = append(names, node.Content[i].Value)
		}
	}
	return names
}
