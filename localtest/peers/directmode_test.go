package peers_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// byorelay's stack hands out no control-plane key, so a real daemon paired
// with it is in direct mode and runs its owner's jobs only. When a roster
// routes someone else's job to it, the relay offers it, the daemon refuses
// it before fetching anything, releases it as refused, and the relay never
// offers it to that device again.
func TestADirectModeDaemonRefusesAnotherPersonsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := peers.NewWorld(t, peers.StartByorelay(t).Origin)
	const bob = "bob"
	if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: bob, SiteID: siteID}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin.PutRoster(ctx, "alice-team", controlplane.RosterRequest{Owner: owner, Members: []string{bob}}); err != nil {
		t.Fatal(err)
	}
	model := peers.NewModel(t, "stand-in")
	daemon, _ := w.PairDaemon(t, model)

	jobID := "job-" + rand.Text()
	stub := w.Site.Stub(jobID, bob, time.Now().Add(15*time.Minute).UnixMilli())
	stub.Audience = "team"
	var enqueued struct {
		State string `json:"state"`
	}
	call(t, w.Origin, w.Site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: pv(), SiteID: siteID, Stub: stub,
	}), &enqueued)

	eventually(t, "the daemon to refuse "+jobID, func() bool {
		for _, ev := range daemon.RunnerEvents(t) {
			if ev.Type == "refused" && ev.JobID == jobID {
				if !strings.Contains(ev.Reason, "serves its owner only") {
					t.Fatalf("refused for %q, want the direct-mode owner-only refusal", ev.Reason)
				}
				return true
			}
		}
		return false
	})
	// Refused before any payload was asked for: nothing reached the model,
	// and the site was never asked to seal to this device again.
	daemon.WaitTicks(t, 3) // three more claims, any of which could get it back
	claims := 0
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.Type == "claimed" && ev.JobID == jobID {
			claims++
		}
	}
	if claims != 1 {
		t.Fatalf("the daemon claimed %s %d times; a refused job must not be offered back", jobID, claims)
	}
	if got := model.Prompts(); len(got) != 0 {
		t.Fatalf("the model was asked %q", got)
	}
	var pending protocol.SitePendingResponse
	call(t, w.Origin, w.Site.Request(t, "pending", time.Now(), nil), &pending)
	if len(pending.Jobs) != 0 {
		t.Fatalf("pending after the refusal: %+v", pending.Jobs)
	}
}
