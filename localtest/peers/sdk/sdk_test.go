// Package sdk_test runs byorelay's own Go clients (client/site and
// client/daemon) against the real npm peers through byorelay's local
// stack: the Go site SDK serving the real daemon, and the Go daemon
// library serving the real site. Apart from localtest/peers' scenarios so
// that a change in the clients' API cannot stop those from building.
package sdk_test

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// The real daemon serves a job published with the Go site SDK, whose pump
// seals the payload to it and verifies the sealed result.
func TestRealDaemonServesTheGoSiteSDK(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := peers.NewWorld(t, peers.StartByorelay(t).Origin)
	model := peers.NewModel(t, "stand-in")
	real, pairing := w.PairDaemon(t, model)

	client, err := site.New(site.Config{RelayURL: w.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys})
	if err != nil {
		t.Fatal(err)
	}
	jobID := "job-" + rand.Text()
	prompt := "what does a blind relay see?"
	state, err := client.Publish(ctx, protocol.JobStub{
		ID: jobID, Kind: "llm.generate", Owner: peers.Owner,
		DeadlineAt: time.Now().Add(15 * time.Minute).UnixMilli(),
	}, protocol.GeneratePayload(prompt))
	if err != nil || state != "queued" {
		t.Fatalf("publish: %q, %v", state, err)
	}

	var got *site.Result
	deadline := time.Now().Add(peers.StepTimeout)
	for got == nil {
		report, err := client.Pump(ctx)
		if err != nil {
			t.Fatalf("pump: %v", err)
		}
		if len(report.Refused) > 0 {
			t.Fatalf("the site refused %+v", report.Refused)
		}
		for _, r := range report.Results {
			if r.JobID == jobID {
				got = &r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result for %s within %s\n%s", jobID, peers.StepTimeout, real.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}

	if got.Outcome.TextOrEmpty() != fakellm.Answer(prompt) || got.Ran.Model != model.Name {
		t.Fatalf("result %+v, want %q from %s", got, fakellm.Answer(prompt), model.Name)
	}
	if got.RunnerID != pairing.RunnerID || got.RunnerOwner != peers.Owner || got.Audience != "team" || !got.Untrusted {
		t.Fatalf("result provenance %+v, want the real daemon %s of %s", got, pairing.RunnerID, peers.Owner)
	}
	if p := model.Prompts(); !slices.Equal(p, []string{prompt}) {
		t.Fatalf("the model was asked %q, want exactly the prompt", p)
	}
}

// The real site publishes through byorelay; the Go daemon library, its
// OpenAI backend pointed at the stand-in model, pairs by device code and
// serves the job; the site opens, verifies and completes the result.
func TestRealSiteServedByTheGoDaemonLibrary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := peers.NewWorld(t, peers.StartByorelay(t).Origin)
	model := peers.NewModel(t, "stand-in")
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{
		RelayURL: w.Origin,
		Keys:     keys,
		Backend:  daemon.OpenAIBackend{BaseURL: model.URL, Model: model.Name},
		// The relay asks for 2 s between pairing polls; a test need not.
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(d, 50*time.Millisecond)):
				return nil
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pairing, err := d.Pair(ctx, "go-daemon", func(code daemon.PairCode) { w.Approve(t, code.UserCode) })
	if err != nil {
		t.Fatalf("pair: %v", err)
	}
	if pairing.Owner != peers.Owner || len(pairing.Sites) != 1 || pairing.ControlPlanePublic != "" {
		t.Fatalf("paired %+v", pairing)
	}
	if _, ok := pairing.Sites[w.Site.KeyID()]; !ok {
		t.Fatalf("pinned %v, want %s", pairing.Sites, w.Site.KeyID())
	}

	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		for ctx.Err() == nil {
			if _, err := d.Tick(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("tick: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-ticking }()

	prompt := "one sentence on device-code pairing"
	real := peers.StartSite(t, peers.SiteOptions{
		Relay: w.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys, Owner: peers.Owner, Prompt: prompt,
	})
	enqueued := real.Enqueued(t)
	done := real.Result(t)
	if done.JobID != enqueued.JobID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the site completed %+v, want ok %q", done, fakellm.Answer(prompt))
	}
	if p := done.Provenance; p == nil || p.RunnerID != pairing.RunnerID || p.RunnerOwner != peers.Owner || p.Model != model.Name {
		t.Fatalf("provenance %+v", done.Provenance)
	}
	if p := model.Prompts(); !slices.Equal(p, []string{prompt}) {
		t.Fatalf("the model was asked %q, want exactly the prompt", p)
	}
}
