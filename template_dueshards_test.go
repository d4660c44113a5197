package byorelay_test

import (
	"strconv"
	"testing"

	"github.com/byorelay/byorelay/store/dynamo"
)

// The due index's shard count is one setting for the whole deployment:
// the DueShards parameter, whose default is the store's, reaches every
// function as DUE_SHARDS through the functions' shared environment, and no
// function sets a value of its own. Two functions over one table with two
// counts would each leave the other's upper shards unread.
func TestTheTemplateGivesEveryFunctionOneDueShardCount(t *testing.T) {
	p := parseTemplate(t)
	param := at(p.root, "Parameters", "DueShards")
	if param == nil {
		t.Fatal("template.yaml has no DueShards parameter")
	}
	if d := at(param, "Default"); d == nil || d.Value != strconv.Itoa(dynamo.DefaultDueShards) {
		t.Errorf("DueShards defaults to %v, want the store's %d", d, dynamo.DefaultDueShards)
	}
	if m := at(param, "MaxValue"); m == nil || m.Value != strconv.Itoa(dynamo.MaxDueShards) {
		t.Errorf("DueShards MaxValue is %v, want the store's %d", m, dynamo.MaxDueShards)
	}
	if m := at(param, "MinValue"); m == nil || m.Value != "1" {
		t.Errorf("DueShards MinValue is %v, want 1", m)
	}
	v := at(p.root, "Globals", "Function", "Environment", "Variables", "DUE_SHARDS")
	if v == nil || v.Tag != "!Ref" || v.Value != "DueShards" {
		t.Fatalf("the functions' shared environment does not set DUE_SHARDS to !Ref DueShards (%v)", v)
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
			t.Errorf("%s is not a SAM function, so it does not get the shared DUE_SHARDS", name)
		}
		if own := at(r, "Properties", "Environment", "Variables", "DUE_SHARDS"); own != nil {
			t.Errorf("%s sets DUE_SHARDS itself", name)
		}
	}
	if functions == 0 {
		t.Fatal("found no functions in template.yaml")
	}
}
