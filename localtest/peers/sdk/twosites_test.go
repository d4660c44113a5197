package sdk_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
)

// Two sites publish through one byorelay at the same time, to the same
// real byollm 0.1.1 daemon: the real @byollm/server 0.1.1 site on its
// relay lane, and the Go site app (siteserver on the cloud lane, its jobs
// in a site table on DynamoDB Local). Every job of both is queued before
// the daemon pairs, so the two sites pump side by side while it works.
// The daemon pins both at pairing; each site receives every one of its
// own results, opened and verified as the daemon's, and never sees the
// other's jobs; the model is asked every prompt exactly once.
func TestTwoSitesOneRelayOneRealDaemon(t *testing.T) {
	t.Parallel()
	const jobs = 3
	// The whole run: a byorelay, a real site, a model and a real daemon
	// each start (on a loaded machine Node alone takes seconds to load),
	// and each of those steps may take up to peers.StepTimeout, so the
	// run's bound is several of them; it stops the Go site's pump, which
	// must outlast the daemon's work.
	ctx, cancel := context.WithTimeout(context.Background(), 6*peers.StepTimeout)
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

	// The Go site app pumps from the start, so it seals as soon as a claim
	// lands.
	table := "site-go-" + strings.ToLower(rand.Text())
	db := localtest.DynamoClient(t)
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	store, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	app, err := siteserver.New(siteserver.Config{Store: store, Keys: goSite.Keys,
		Cloud: &siteserver.CloudLane{RelayURL: w.Origin, SiteID: goSiteID}})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan site.Report, 64)
	pumped := make(chan error, 1)
	go func() { pumped <- app.Run(ctx, 100*time.Millisecond, func(r site.Report) { reports <- r }) }()
	t.Cleanup(func() { cancel(); <-pumped })

	// Both sites enqueue at once.
	real := peers.StartSite(t, peers.SiteOptions{
		Relay: w.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys, Owner: peers.Owner, Prompt: "a job from the real site", Count: jobs,
	})
	goPrompts := map[string]string{}
	for i := 1; i <= jobs; i++ {
		prompt := fmt.Sprintf("a job from the Go site #%d", i)
		payload, err := json.Marshal(map[string]string{"prompt": prompt})
		if err != nil {
			t.Fatal(err)
		}
		j, err := app.Enqueue(ctx, siteserver.EnqueueInput{Kind: "llm.generate", Payload: payload, Owner: peers.Owner})
		if err != nil {
			t.Fatalf("the Go site enqueueing %q: %v", prompt, err)
		}
		goPrompts[j.ID] = prompt
	}
	realPrompts := map[string]string{}
	for range jobs {
		e := real.Enqueued(t)
		realPrompts[e.JobID] = e.Prompt
	}

	// Only now does the daemon pair, with all six jobs queued.
	model := peers.NewModel(t, "stand-in")
	daemon := peers.StartDaemon(t, peers.DaemonOptions{Origin: w.Origin, Model: model})
	dev := w.Approve(t, daemon.UserCode(t))
	pairing := daemon.Paired(t)
	pinned := slices.Sorted(slices.Values(pairing.Sites))
	if want := slices.Sorted(slices.Values([]string{w.Site.KeyID(), goSite.KeyID()})); !slices.Equal(pinned, want) {
		t.Fatalf("the daemon pinned %v, want both sites %v", pinned, want)
	}
	runner := dev.Device.RunnerID

	// The real site: every one of its jobs ends ok with the daemon's answer.
	for range jobs {
		done := real.Result(t)
		prompt, ours := realPrompts[done.JobID]
		if !ours || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
			t.Fatalf("the real site completed %+v, want ok %q", done, fakellm.Answer(prompt))
		}
		if p := done.Provenance; p == nil || p.RunnerID != runner || p.RunnerOwner != peers.Owner || p.Model != model.Name {
			t.Fatalf("the real site's provenance %+v, want the real daemon %s", done.Provenance, runner)
		}
		delete(realPrompts, done.JobID)
	}

	// The Go site: every one of its jobs ends in its store, verified as the
	// daemon's (its reports say so as each ends), and it refuses nothing:
	// a job it did not publish never reaches it.
	for ended := 0; ended < jobs; {
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
			if _, ours := goPrompts[e.JobID]; !ours || e.Fate != site.FateVerified {
				t.Fatalf("the Go site ended %+v, want one of its own jobs verified", e)
			}
			ended++
		}
	}
	for id, prompt := range goPrompts {
		got, found, err := app.Result(ctx, id)
		if err != nil || !found {
			t.Fatalf("the Go site's job %s: found %v, %v", id, found, err)
		}
		if got.State != "ok" || got.Outcome == nil || got.Outcome.Text == nil || *got.Outcome.Text != fakellm.Answer(prompt) {
			t.Fatalf("the Go site's job %s ended %+v, want ok %q", id, got, fakellm.Answer(prompt))
		}
		if p := got.Provenance; p == nil || p.RunnerID != runner || p.RunnerOwner != peers.Owner || p.Model != model.Name || p.Audience != "team" {
			t.Fatalf("the Go site's job %s has provenance %+v, want the real daemon %s", id, got.Provenance, runner)
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
