package dynamo

import (
	"testing"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/localtest/cfntable"
)

// TestTheTableIsSiteTemplateYAMLs: the site table tests and local runs
// create is the one site-template.yaml deploys (attributes, keys, indexes,
// billing, TTL), so the Go definition and the template cannot drift.
func TestTheTableIsSiteTemplateYAMLs(t *testing.T) {
	tpl, err := cfntable.FromTemplate(byorelay.SiteTemplate, "SiteTable")
	if err != nil {
		t.Fatal(err)
	}
	if err := tpl.Check(tableInput("t"), ttlAttribute); err != nil {
		t.Error(err)
	}
}
