package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// The Go clients against the real peers from npm, through byorelay's local
// stack: the Go site with the byollm 0.1.1 daemon, and the Go daemon with
// the @byollm/server 0.1.1 site. Each side verifies the other's signatures
// and parses the other's plaintext strictly, so a byte out of place on
// either leg fails here.

func TestTheGoSiteIsServedByTheRealByollmDaemon(t *testing.T) {
	br := peers.StartByorelay(t)
	w := peers.NewWorld(t, br.Origin)
	model := peers.NewModel(t, "stand-in-model")
	realDaemon, pairing := w.PairDaemon(t, model)

	shop, err := site.New(site.Config{RelayURL: br.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys})
	if err != nil {
		t.Fatal(err)
	}
	prompt := "what is two and two?"
	stub := protocol.JobStub{ID: "interop-1", Kind: protocol.KindGenerate, Owner: peers.Owner, Audience: "private",
		DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}
	ctx := context.Background()
	if _, err := shop.Publish(ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
		t.Fatal(err)
	}
	var got *site.Result
	waitUntil(t, peers.StepTimeout, "the real daemon's result", func() bool {
		rep, err := shop.Pump(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Refused {
			t.Fatalf("the Go site refused %s: %s", r.JobID, r.Reason)
		}
		if len(rep.Results) > 0 {
			got = &rep.Results[0]
		}
		return got != nil
	}, func() string { return realDaemon.Log() })
	if got.Outcome.Outcome != protocol.DispositionOK || got.Outcome.TextOrEmpty() != fakellm.Answer(prompt) {
		t.Fatalf("outcome %+v, want ok %q", got.Outcome, fakellm.Answer(prompt))
	}
	if got.RunnerID != pairing.RunnerID || got.RunnerOwner != peers.Owner || got.Ran.Model != model.Name {
		t.Fatalf("result from %s (%s) on %s; want %s (%s) on %s", got.RunnerID, got.RunnerOwner, got.Ran.Model,
			pairing.RunnerID, peers.Owner, model.Name)
	}
	if outcome := realDaemon.Finished(t, "interop-1"); outcome != "ok" {
		t.Fatalf("the real daemon finished with %s", outcome)
	}
}

func TestTheGoDaemonServesTheRealServerSite(t *testing.T) {
	br := peers.StartByorelay(t)
	w := peers.NewWorld(t, br.Origin)
	model := peers.NewModel(t, "stand-in-model")

	keys := mustKeys(t)
	d, err := daemon.New(daemon.Config{
		RelayURL: br.Origin, Keys: keys, HeartbeatInterval: 500 * time.Millisecond,
		Backend: daemon.OpenAIBackend{BaseURL: model.URL, Model: model.Name, ID: "openai-http"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pairing, err := d.Pair(ctx, "go daemon", func(c daemon.PairCode) { w.Approve(t, c.UserCode) })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pairing.Sites[w.Site.KeyID()]; !ok {
		t.Fatalf("the Go daemon pinned %v, not the site %s", pairing.Sites, w.Site.KeyID())
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	defer func() {
		stop()
		<-ran
		_ = d.Shutdown(context.Background())
	}()

	prompt := "name a colour"
	realSite := peers.StartSite(t, peers.SiteOptions{Relay: br.Origin, SiteID: peers.SiteID, Keys: w.Site.Keys, Owner: peers.Owner, Prompt: prompt})
	job := realSite.Enqueued(t)
	res := realSite.Result(t)
	if res.JobID != job.JobID || res.State != "ok" || res.Outcome == nil || res.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the real site delivered %+v\n%s", res, realSite.Log())
	}
	if p := res.Provenance; p == nil || p.RunnerID != pairing.RunnerID || p.RunnerOwner != peers.Owner ||
		p.Model != model.Name || p.BackendClass != "http" {
		t.Fatalf("provenance %+v, want runner %s of %s on %s", res.Provenance, pairing.RunnerID, peers.Owner, model.Name)
	}
}

// The Go site and the Go daemon through the reference relay,
// @byollm/relay 0.1.1: what byorelay copies, so the clients are checked
// against the original and not only against our port of it. With a
// control plane, every job carries a grant the reference signed, which the
// Go daemon verifies against the key it pinned at pairing.
func TestTheGoClientsWorkThroughTheReferenceRelay(t *testing.T) {
	for _, controlPlane := range []bool{false, true} {
		t.Run(map[bool]string{false: "without a control plane", true: "with grants"}[controlPlane], func(t *testing.T) {
			origin := peers.StartReferenceRelay(t, controlPlane)
			w := peers.NewWorld(t, origin)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()

			d, err := daemon.New(daemon.Config{RelayURL: origin, Keys: mustKeys(t), Backend: daemon.EchoBackend{},
				HeartbeatInterval: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			pairing, err := d.Pair(ctx, "go daemon", func(c daemon.PairCode) { w.Approve(t, c.UserCode) })
			if err != nil {
				t.Fatal(err)
			}
			if (pairing.ControlPlanePublic != "") != controlPlane {
				t.Fatalf("control-plane key pinned: %q, want one: %v", pairing.ControlPlanePublic, controlPlane)
			}
			ran := make(chan error, 1)
			go func() { ran <- d.Run(ctx) }()
			defer func() {
				stop()
				<-ran
				_ = d.Shutdown(context.Background())
			}()

			shop, err := site.New(site.Config{RelayURL: origin, SiteID: peers.SiteID, Keys: w.Site.Keys})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i := range 3 {
				id := "ref-" + string(rune('a'+i))
				p := "question " + id
				stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: peers.Owner, Audience: "private",
					DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}
				if _, err := shop.Publish(ctx, stub, protocol.GeneratePayload(p)); err != nil {
					t.Fatal(err)
				}
				want[id] = "echo: " + p
			}
			got := map[string]site.Result{}
			waitUntil(t, peers.StepTimeout, "three results through the reference relay", func() bool {
				rep, err := shop.Pump(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Refused {
					t.Fatalf("the Go site refused %s: %s", r.JobID, r.Reason)
				}
				for _, r := range rep.Results {
					if _, dup := got[r.JobID]; dup {
						t.Fatalf("%s delivered twice", r.JobID)
					}
					got[r.JobID] = r
				}
				return len(got) == len(want)
			}, func() string { return "" })
			for id, text := range want {
				if r := got[id]; r.Outcome.TextOrEmpty() != text || r.RunnerID != pairing.RunnerID {
					t.Errorf("%s: %+v, want %q from %s", id, r, text, pairing.RunnerID)
				}
			}
		})
	}
}
