package sdk_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/relay/relaytest"
)

// Two sites publish through one byorelay at the same time, to the same
// real byollm 0.1.1 daemon: the real @byollm/server 0.1.1 site on its
// relay lane, and a Go site. The daemon pins both at pairing; each site
// receives every one of its own results, opened and verified as the
// daemon's, and never sees the other's jobs; the model is asked every
// prompt exactly once.
func TestTwoSitesOneRelayOneRealDaemon(t *testing.T) {
	t.Parallel()
	const jobs = 3
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	w := peers.NewWorld(t, peers.StartByorelay(t).Origin)
	const goSiteID = "site-go"
	goSite := relaytest.NewSite(t, goSiteID)
	if _, err := w.Admin.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: goSiteID, Site: goSite.Public()}); err != nil {
		t.Fatalf("register the Go site: %v", err)
	}
	if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: peers.Owner, SiteID: goSiteID}); err != nil {
		t.Fatalf("consent to the Go site: %v", err)
	}

	model := peers.NewModel(t, "stand-in")
	daemon := peers.StartDaemon(t, peers.DaemonOptions{Origin: w.Origin, Model: model})
	dev := w.Approve(t, daemon.UserCode(t))
	pairing := daemon.Paired(t)
	pinned := slices.Sorted(slices.Values(pairing.Sites))
	if want := slices.Sorted(slices.Values([]string{w.Site.KeyID(), goSite.KeyID()})); !slices.Equal(pinned, want) {
		t.Fatalf("the daemon pinned %v, want both sites %v", pinned, want)
	}
	runner := dev.Device.RunnerID

	// The Go site pumps from the start, so it seals as soon as a claim lands.
	client, err := site.New(site.Config{RelayURL: w.Origin, SiteID: goSiteID, Keys: goSite.Keys})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan site.Report, 64)
	pumped := make(chan error, 1)
	go func() { pumped <- client.Run(ctx, 100*time.Millisecond, func(r site.Report) { reports <- r }) }()
	t.Cleanup(func() { cancel(); <-pumped })

	// Both sites enqueue at once.
	real := peers.StartSite(t, peers.SiteOptions{
		Relay: w.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys, Owner: peers.Owner, Prompt: "a job from the real site", Count: jobs,
	})
	goPrompts := map[string]string{}
	for i := 1; i <= jobs; i++ {
		id := "go-" + rand.Text()
		goPrompts[id] = fmt.Sprintf("a job from the Go site #%d", i)
		stub := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: peers.Owner, DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}
		if _, err := client.Publish(ctx, stub, site.GeneratePayload(goPrompts[id])); err != nil {
			t.Fatalf("the Go site publishing %s: %v", id, err)
		}
	}
	realPrompts := map[string]string{}
	for range jobs {
		e := real.Enqueued(t)
		realPrompts[e.JobID] = e.Prompt
	}

	// The real site: every one of its jobs ends ok with the daemon's answer.
	for range jobs {
		done := real.Result(t)
		prompt, ours := realPrompts[done.JobID]
		if !ours || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != peers.Answer(prompt) {
			t.Fatalf("the real site completed %+v, want ok %q", done, peers.Answer(prompt))
		}
		if p := done.Provenance; p == nil || p.RunnerID != runner || p.RunnerOwner != peers.Owner || p.Model != model.Name {
			t.Fatalf("the real site's provenance %+v, want the real daemon %s", done.Provenance, runner)
		}
		delete(realPrompts, done.JobID)
	}

	// The Go site: every one of its jobs verified as the daemon's, and no
	// job it did not publish.
	for len(goPrompts) > 0 {
		var rep site.Report
		select {
		case rep = <-reports:
		case err := <-pumped:
			t.Fatalf("the Go site's pump stopped: %v", err)
		}
		if len(rep.Refused) > 0 {
			t.Fatalf("the Go site refused %+v", rep.Refused)
		}
		for _, e := range rep.Ended {
			prompt, ours := goPrompts[e.JobID]
			if !ours {
				t.Fatalf("the Go site ended a job it never published, or twice: %+v", e)
			}
			if e.Fate != site.FateVerified || e.Result.Outcome.Outcome != site.OutcomeOK || e.Result.Outcome.Text == nil ||
				*e.Result.Outcome.Text != peers.Answer(prompt) {
				t.Fatalf("the Go site's job %s ended %s %s %+v, want verified %q", e.JobID, e.Fate, e.Reason, e.Result, peers.Answer(prompt))
			}
			if e.Result.RunnerID != runner || e.Result.RunnerOwner != peers.Owner || e.Result.Ran.Model != model.Name {
				t.Fatalf("the Go site's job %s ran on %s (%s) with %s, want the real daemon %s", e.JobID,
					e.Result.RunnerID, e.Result.RunnerOwner, e.Result.Ran.Model, runner)
			}
			delete(goPrompts, e.JobID)
		}
	}

	// Every prompt went to the model exactly once, and the daemon refused
	// nothing.
	var want []string
	for i := 1; i <= jobs; i++ {
		want = append(want, fmt.Sprintf("a job from the real site #%d", i), fmt.Sprintf("a job from the Go site #%d", i))
	}
	if got := slices.Sorted(slices.Values(model.Prompts())); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("the model was asked %q, want each of %q once", got, want)
	}
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.Type == "refused" || ev.Type == "grant-refused" || ev.Type == "error" {
			t.Fatalf("daemon reported %+v\n%s", ev, daemon.Log())
		}
	}
}
