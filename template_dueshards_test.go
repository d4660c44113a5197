package byorelay_test

import (
	"strconv"
	"testing"

	"github.com/byorelay/byorelay/store/dynamo"
)

// Each shard count of the routing table is one setting for the whole
// deployment: its parameter, whose default and bounds are the store's,
// reaches every function through the functions' shared environment, and
// no function sets a value of its own. Two functions over one table with
// two counts would each leave the other's upper shards unread.
func TestTheTemplateGivesEveryFunctionOneShardCountEach(t *testing.T) {
	p := parseTemplate(t)
	for _, c := range []struct {
		param, variable string
		def, limit      int
	}{
		{"DueShards", "DUE_SHARDS", dynamo.DefaultDueShards, dynamo.MaxDueShards},
		{"UnsealedShards", "UNSEALED_SHARDS", dynamo.DefaultUnsealedShards, dynamo.MaxSiteShards},
		{"FinishedShards", "FINISHED_SHARDS", dynamo.DefaultFinishedShards, dynamo.MaxSiteShards},
	} {
		param := at(p.root, "Parameters", c.param)
		if param == nil {
			t.Fatalf("template.yaml has no %s parameter", c.param)
		}
		if d := at(param, "Default"); d == nil || d.Value != strconv.Itoa(c.def) {
			t.Errorf("%s defaults to %v, want the store's %d", c.param, d, c.def)
		}
		if m := at(param, "MaxValue"); m == nil || m.Value != strconv.Itoa(c.limit) {
			t.Errorf("%s MaxValue is %v, want the store's %d", c.param, m, c.limit)
		}
		if m := at(param, "MinValue"); m == nil || m.Value != "1" {
			t.Errorf("%s MinValue is %v, want 1", c.param, m)
		}
		v := at(p.root, "Globals", "Function", "Environment", "Variables", c.variable)
		if v == nil || v.Tag != "!Ref" || v.Value != c.param {
			t.Fatalf("the functions' shared environment does not set %s to !Ref %s (%v)", c.variable, c.param, v)
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
				t.Errorf("%s is not a SAM function, so it does not get the shared %s", name, c.variable)
			}
			if own := at(r, "Properties", "Environment", "Variables", c.variable); own != nil {
				t.Errorf("%s sets %s itself", name, c.variable)
			}
		}
		if functions == 0 {
			t.Fatal("found no functions in template.yaml")
		}
	}
}
