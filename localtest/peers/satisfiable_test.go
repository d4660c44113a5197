package peers_test

import (
	"context"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// With grants on, the relay answers the enqueue-time question, and a stock
// @byollm/server site hears each verdict as the error its own client maps
// it to: a refusal (EnqueueRefused, with the protocol's code) for a purpose
// the site does not declare, a slot nobody mapped and a slot whose service
// nobody runs right now; and, once a live device advertises the mapped
// service, its job is taken and answered.
func TestARealSiteHearsEachSlotVerdictAtEnqueue(t *testing.T) {
	t.Parallel()
	origin, _ := startStackWithGrants(t)
	w := worldWithTeam(t, origin) // bob mapped llm.generate to alice's service
	ctx := context.Background()
	if _, err := w.Admin.SetSitePurposes(ctx, siteID, []string{"summarise", "default"}); err != nil {
		t.Fatal(err)
	}
	refused := func(name string, o peers.SiteOptions, code string) {
		t.Helper()
		o.Relay, o.SiteID, o.Keys, o.Prompt = w.Origin, siteID, w.Site.Keys, name
		r := peers.StartSite(t, o).Refused(t)
		if r.Error != "EnqueueRefused" || r.Code != code || r.Retryable {
			t.Fatalf("%s: the site heard %+v, want EnqueueRefused %s", name, r, code)
		}
	}
	// The site does not declare it.
	refused("translate", peers.SiteOptions{Owner: teammate, Purpose: "translate"}, protocol.CodePurposeNotDeclared)
	// Nobody chose a service for alice's own jobs yet.
	refused("unmapped", peers.SiteOptions{Owner: owner}, protocol.CodeSlotUnsatisfiable)
	// bob's slot is mapped to alice's service, but no device of hers is
	// paired, so nothing advertises it.
	refused("waiting", peers.SiteOptions{Owner: teammate}, protocol.CodeSlotWaiting)

	model := peers.NewModel(t, "stand-in")
	daemon, _ := pairWithOffer(t, w, model, protocol.AudienceTeam)
	site := peers.StartSite(t, peers.SiteOptions{Relay: w.Origin, SiteID: siteID, Keys: w.Site.Keys, Owner: teammate, Prompt: "now it runs"})
	enqueued := site.Enqueued(t)
	if done := site.Result(t); done.JobID != enqueued.JobID || done.State != "ok" {
		t.Fatalf("the site completed %+v\n%s", done, daemon.Log())
	}
	// Unmapping it again refuses the next job at once.
	if _, err := w.Admin.Unmap(ctx, controlplane.UnmapRequest{Owner: teammate, SiteID: siteID, Kind: "llm.generate"}); err != nil {
		t.Fatal(err)
	}
	refused("unmapped again", peers.SiteOptions{Owner: teammate}, protocol.CodeSlotUnsatisfiable)
}
