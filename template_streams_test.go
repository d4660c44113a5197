package byorelay_test

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/stream/seal"
)

// tpl is template.yaml as YAML nodes: CloudFormation's short-form tags
// (!Ref, !GetAtt) are opaque to a plain decoder.
type tpl struct{ root *yaml.Node }

func parseTemplate(t *testing.T) tpl {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(byorelay.Template, &doc); err != nil {
		t.Fatal(err)
	}
	return tpl{doc.Content[0]}
}

// at walks mapping keys; nil when a key is missing.
func at(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func (p tpl) resource(t *testing.T, name string) *yaml.Node {
	t.Helper()
	r := at(p.root, "Resources", name)
	if r == nil {
		t.Fatalf("template.yaml has no resource %s", name)
	}
	return r
}

// grants is every action a function's inline policies allow, with the
// resources each is allowed on (as the YAML spells them).
func (p tpl) grants(t *testing.T, function string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pol := range at(p.resource(t, function), "Properties", "Policies").Content {
		for _, st := range at(pol, "Statement").Content {
			if st.Tag == "!If" {
				continue // a conditional statement (the grant key): not a table grant
			}
			if at(st, "Effect").Value != "Allow" {
				t.Fatalf("%s: a statement that does not Allow", function)
			}
			var resources []string
			res := at(st, "Resource")
			nodes := []*yaml.Node{res}
			if res.Kind == yaml.SequenceNode {
				nodes = res.Content
			}
			for _, r := range nodes {
				resources = append(resources, r.Tag+" "+r.Value)
			}
			actions := at(st, "Action")
			list := []*yaml.Node{actions}
			if actions.Kind == yaml.SequenceNode {
				list = actions.Content
			}
			for _, a := range list {
				out[a.Value] = append(out[a.Value], resources...)
			}
		}
	}
	return out
}

func actions(g map[string][]string) []string {
	var out []string
	for a := range g {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// The attach function is served through a function URL in response
// streaming mode (API Gateway would buffer its events), is reached by no
// API route, and may only read the table: an attach reads and never writes.
func TestAttachStreamsThroughAFunctionURLAndOnlyReads(t *testing.T) {
	p := parseTemplate(t)
	fn := p.resource(t, "StreamAttachFunction")
	url := at(fn, "Properties", "FunctionUrlConfig")
	if at(url, "InvokeMode").Value != "RESPONSE_STREAM" || at(url, "AuthType").Value != "NONE" {
		t.Fatalf("FunctionUrlConfig: InvokeMode %q, AuthType %q", at(url, "InvokeMode").Value, at(url, "AuthType").Value)
	}
	if at(fn, "Properties", "Events") != nil {
		t.Fatal("the attach function has events: it is reached only through its URL")
	}
	g := p.grants(t, "StreamAttachFunction")
	if got := actions(g); !slices.Equal(got, []string{"dynamodb:GetItem", "dynamodb:Query"}) {
		t.Fatalf("the attach function may %v; want GetItem and Query alone", got)
	}
	for a, res := range g {
		if !slices.Equal(res, []string{"!GetAtt RoutingTable.Arn"}) {
			t.Fatalf("%s on %v: the table alone (no index is read)", a, res)
		}
	}
	// Its timeout outlasts the SSE window, so the relay closes each
	// response itself rather than Lambda killing it.
	if at(fn, "Properties", "Timeout").Value != "100" {
		t.Fatalf("Timeout %s", at(fn, "Properties", "Timeout").Value)
	}
}

// The append has its own route and a role that can commit an append (a
// TransactWriteItems is authorised per action it carries: the job's
// ConditionCheck, the header's Update, the frame's Put) and nothing else:
// no delete, no envelope bucket, no index.
func TestAppendFunctionMayWriteAnAppendAndNothingElse(t *testing.T) {
	p := parseTemplate(t)
	route := at(p.resource(t, "StreamAppendFunction"), "Properties", "Events", "Route", "Properties")
	if at(route, "Path").Value != seal.StreamAppendPath || at(route, "Method").Value != "ANY" {
		t.Fatalf("append route %s %s", at(route, "Method").Value, at(route, "Path").Value)
	}
	g := p.grants(t, "StreamAppendFunction")
	want := []string{"dynamodb:ConditionCheckItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"}
	if got := actions(g); !slices.Equal(got, want) {
		t.Fatalf("the append function may %v; want %v", got, want)
	}
	for a, res := range g {
		if !slices.Equal(res, []string{"!GetAtt RoutingTable.Arn"}) {
			t.Fatalf("%s on %v: the table alone", a, res)
		}
	}
}

// The catch-all runs the whole relay, the stream lane included (an append
// on a path variant the route misses, the long-poll attach on the API's
// host): its role can commit an append.
func TestTheCatchAllMayServeTheStreamLane(t *testing.T) {
	g := parseTemplate(t).grants(t, "CatchAllFunction")
	for _, a := range []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"} {
		if _, ok := g[a]; !ok {
			t.Errorf("the catch-all may not %s", a)
		}
	}
}

// Every function that serves requests reads the origin secret (the lock
// holds on the attach function's URL too), and no other may: the sweeper
// serves none. The edge sends the attach path to that URL with the
// secret, without the viewer's Host (a function URL answers only to its
// own).
func TestEdgeForwardsTheAttachToItsURLWithTheSecret(t *testing.T) {
	p := parseTemplate(t)
	var roles []string
	for _, r := range at(p.resource(t, "OriginSecretRead"), "Properties", "Roles").Content {
		roles = append(roles, r.Value)
	}
	for _, f := range lambdafn.Functions() {
		reads := slices.Contains(roles, f.LogicalID+"Role")
		if serves := f.Kind != lambdafn.KindSchedule; reads != serves {
			t.Errorf("%s: reads the origin secret %v, serves requests %v", f.LogicalID, reads, serves)
		}
	}
	if len(roles) != len(lambdafn.Functions())-1 {
		t.Errorf("the origin secret's readers are %v: a role that is no function's", roles)
	}

	dist := at(p.resource(t, "Edge"), "Properties", "DistributionConfig")
	var behaviour *yaml.Node
	for _, b := range at(dist, "CacheBehaviors").Content {
		if at(b, "PathPattern").Value == seal.StreamAttachPath {
			behaviour = b
		}
	}
	if behaviour == nil {
		t.Fatal("no cache behaviour for the attach path")
	}
	// AllViewerExceptHostHeader and CachingDisabled, managed policies.
	if at(behaviour, "OriginRequestPolicyId").Value != "b689b0a8-53d0-40ab-baf2-68738e2966ac" ||
		at(behaviour, "CachePolicyId").Value != "4135ea2d-6df8-44a3-9df3-4b5a84be39ad" {
		t.Fatal("the attach behaviour must forward all but Host and cache nothing")
	}
	target := at(behaviour, "TargetOriginId").Value
	for _, o := range at(dist, "Origins").Content {
		if at(o, "Id").Value != target {
			continue
		}
		if d := at(o, "DomainName"); !strings.Contains(nodeText(d), "StreamAttachFunctionUrl.FunctionUrl") {
			t.Fatalf("origin %s is not the attach function's URL: %s", target, nodeText(d))
		}
		for _, h := range at(o, "OriginCustomHeaders").Content {
			if at(h, "HeaderName").Value == relay.OriginSecretHeader {
				return
			}
		}
		t.Fatalf("origin %s carries no %s", target, relay.OriginSecretHeader)
	}
	t.Fatalf("no origin %s", target)
}

// nodeText is every scalar under n, joined.
func nodeText(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	s := n.Value
	for _, c := range n.Content {
		s += " " + nodeText(c)
	}
	return s
}
