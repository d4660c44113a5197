package byorelay_test

import (
	"strconv"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/store/dynamo"
)

// Each shard count of the routing table (the due index's, a site's
// unsealed sets' and finished list's) and the control plane's site copy
// count is one setting for the whole deployment: a parameter, whose
// default and bounds are the code's, reaching every function through the
// functions' shared environment, and no function setting a value of its
// own. Two functions over one table with two shard counts would each leave
// the other's upper shards unread; with two copy counts, one function's
// site changes would leave copies the other reads unwritten.
func TestTheTemplateGivesEveryFunctionOneShardCountEach(t *testing.T) {
	for _, setting := range []struct {
		param, env    string
		def, maxValue int
	}{
		{"DueShards", "DUE_SHARDS", dynamo.DefaultDueShards, dynamo.MaxDueShards},
		{"SiteCopies", "SITE_COPIES", controlplane.DefaultSiteCopies, controlplane.MaxSiteCopies},
		{"UnsealedShards", "UNSEALED_SHARDS", dynamo.DefaultUnsealedShards, dynamo.MaxSiteShards},
		{"FinishedShards", "FINISHED_SHARDS", dynamo.DefaultFinishedShards, dynamo.MaxSiteShards},
	} {
		t.Run(setting.param, func(t *testing.T) { oneTableSetting(t, setting.param, setting.env, setting.def, setting.maxValue) })
	}
}

func oneTableSetting(t *testing.T, param, env string, def, maxValue int) {
	p := parseTemplate(t)
	node := at(p.root, "Parameters", param)
	if node == nil {
		t.Fatalf("template.yaml has no %s parameter", param)
	}
	if d := at(node, "Default"); d == nil || d.Value != strconv.Itoa(def) {
		t.Errorf("%s defaults to %v, want the code's %d", param, d, def)
	}
	if m := at(node, "MaxValue"); m == nil || m.Value != strconv.Itoa(maxValue) {
		t.Errorf("%s MaxValue is %v, want the code's %d", param, m, maxValue)
	}
	if m := at(node, "MinValue"); m == nil || m.Value != "1" {
		t.Errorf("%s MinValue is %v, want 1", param, m)
	}
	v := at(p.root, "Globals", "Function", "Environment", "Variables", env)
	if v == nil || v.Tag != "!Ref" || v.Value != param {
		t.Fatalf("the functions' shared environment does not set %s to !Ref %s (%v)", env, param, v)
	}
	functions := 0
	resources := at(p.root, "Resources")
	for i := 0; i+1 < len(resources.Content); i += 2 {
		name, r := resources.Content[i].Value, resources.Content[i+1]
		if typ := at(r, "Type"); typ == nil || (typ.Value != "AWS::Serverless::Function" && typ.Value != "AWS::Lambda::Function") {
			continue
		}
		functions++
		if typ := at(r, "Type"); typ.Value != "AWS::Serverless::Function" {
			t.Errorf("%s is not a SAM function, so it does not get the shared %s", name, env)
		}
		if own := at(r, "Properties", "Environment", "Variables", env); own != nil {
			t.Errorf("%s sets %s itself", name, env)
		}
	}
	if functions == 0 {
		t.Fatal("found no functions in template.yaml")
	}
}
