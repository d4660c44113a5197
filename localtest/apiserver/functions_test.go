package apiserver

import (
	"slices"
	"testing"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/lambdafn"
)

// The template decides routing; the function registry names what each
// function expects to be reached by. A route in the template that the
// registry does not list for that function is one of the two drifting.
func TestEveryTemplateRouteIsOneItsFunctionExpects(t *testing.T) {
	routes, err := RoutesFromTemplate(byorelay.Template)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		t.Fatal("template.yaml declares no HttpApi routes")
	}
	byLogicalID := map[string]lambdafn.Function{}
	for _, f := range lambdafn.Functions() {
		byLogicalID[f.LogicalID] = f
	}
	for _, r := range routes {
		f, ok := byLogicalID[r.Function]
		if !ok {
			t.Errorf("route %q invokes %s, which the registry does not know", r.Key, r.Function)
			continue
		}
		if f.Kind != lambdafn.KindHTTP || !slices.Contains(f.Routes, r.Key) {
			t.Errorf("route %q invokes %s, whose registry routes are %q", r.Key, r.Function, f.Routes)
		}
	}
}
