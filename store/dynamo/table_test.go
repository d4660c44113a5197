package dynamo

import (
	"testing"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/localtest/cfntable"
)

// TestTheTableIsTemplateYAMLs: the table tests and local runs create is the
// one template.yaml deploys (attributes, keys, the three sparse indexes the
// store queries, on-demand billing, TTL), so the Go definition and the
// template cannot drift.
func TestTheTableIsTemplateYAMLs(t *testing.T) {
	tpl, err := cfntable.FromTemplate(byorelay.Template, "RoutingTable")
	if err != nil {
		t.Fatal(err)
	}
	if err := tpl.Check(tableInput("t"), ttlAttribute); err != nil {
		t.Error(err)
	}
}
