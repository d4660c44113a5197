package peers_test

import (
	"crypto/rand"
	"encoding/json"
	"slices"
	"testing"

	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
)

// The real byollm daemon, paired by device code and approved through the
// admin API, serves a job a Go site published; the sealed result opens
// and verifies at the site.
func TestRealDaemonServesAGoSite(t *testing.T) {
	t.Parallel()
	for _, r := range []target{byorelay} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			w := peers.NewWorld(t, r.start(t))
			model := peers.NewModel(t, "stand-in")
			daemon, pairing := w.PairDaemon(t, model)
			if pairing.ControlPlanePublic {
				t.Fatal("the relay handed out a control-plane key it cannot author grants with")
			}
			site := goSite{w}
			jobID := "job-" + rand.Text()
			prompt := "summarise the relay in one line"

			site.publish(t, jobID)
			claim := site.sealWhenClaimed(t, jobID, prompt)
			if claim.RunnerID != pairing.RunnerID {
				t.Fatalf("claimed by %s, want the real daemon %s", claim.RunnerID, pairing.RunnerID)
			}
			res, out := site.collect(t, jobID)

			if res.RunnerID != pairing.RunnerID || res.RunnerOwner != owner || res.LeaseID != claim.LeaseID || *res.Device != *claim.Device {
				t.Fatalf("result names runner %s (%s) lease %s device %v; the claim was %+v",
					res.RunnerID, res.RunnerOwner, res.LeaseID, res.Device, claim)
			}
			if res.Disposition != "ok" || out.Outcome.Outcome != "ok" || out.Outcome.Text != fakellm.Answer(prompt) {
				t.Fatalf("result %s %+v, want ok %q", res.Disposition, out.Outcome, fakellm.Answer(prompt))
			}
			// finish_reason "stop" is the backend's declared "end".
			if out.Ran.Model != model.Name || out.Ran.BackendClass != "http" || out.Ran.Stop != "end" {
				t.Fatalf("ran %+v, want the stand-in model over http, stopped at the end", out.Ran)
			}
			if got := model.Prompts(); !slices.Equal(got, []string{prompt}) {
				t.Fatalf("the model was asked %q, want exactly the prompt", got)
			}
			if got := daemon.Finished(t, jobID); got != "ok" {
				t.Fatalf("daemon finished %s with %s", jobID, got)
			}
		})
	}
}

// The real @byollm/server site, on its relay lane, publishes through the
// relay; its payload is sealed to a Go daemon, and the Go daemon's result
// is collected, opened and completed on the site's side.
func TestRealSitePublishesToAGoDaemon(t *testing.T) {
	t.Parallel()
	for _, r := range []target{byorelay} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			w := peers.NewWorld(t, r.start(t))
			daemon := pairGoDaemon(t, w)
			prompt := "write a haiku about DynamoDB"
			site := peers.StartSite(t, peers.SiteOptions{
				Relay: w.Origin, SiteID: siteID, Keys: w.Site.Keys, Owner: owner, Prompt: prompt,
			})
			enqueued := site.Enqueued(t)

			job := daemon.claim(t)
			if job.ID != enqueued.JobID || job.Owner != owner || job.Site != w.Site.KeyID() ||
				job.Audience != "team" || job.Streaming || job.Kind != "llm.generate" || job.Grant != nil {
				t.Fatalf("claimed %+v; the site enqueued %+v", job, enqueued)
			}
			var payload map[string]any
			if err := json.Unmarshal([]byte(daemon.fetch(t, job)), &payload); err != nil {
				t.Fatal(err)
			}
			if len(payload) != 1 || payload["prompt"] != prompt {
				t.Fatalf("payload %v, want exactly the prompt", payload)
			}
			answer := "the relay saw only ciphertext"
			if got := daemon.result(t, job, answer); !got.Accepted || got.State != "done" {
				t.Fatalf("result answered %+v", got)
			}

			done := site.Result(t)
			if done.JobID != job.ID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != answer {
				t.Fatalf("the site completed %+v", done)
			}
			if p := done.Provenance; p == nil || p.RunnerID != daemon.runnerID || p.RunnerOwner != owner ||
				p.Model != goModel || p.BackendClass != "http" || p.Audience != "team" || !p.Untrusted {
				t.Fatalf("provenance %+v", done.Provenance)
			}
		})
	}
}

// Both real peers, with the relay between them.
func TestRealDaemonServesARealSite(t *testing.T) {
	t.Parallel()
	for _, r := range withBaseline {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			w := peers.NewWorld(t, r.start(t))
			model := peers.NewModel(t, "stand-in")
			daemon, pairing := w.PairDaemon(t, model)
			runRealPair(t, w, model, daemon, pairing)
		})
	}
}

// runRealPair runs one job from the real site to the real daemon and
// checks what each side ends up with.
func runRealPair(t *testing.T, w *peers.World, model *peers.Model, daemon *peers.Daemon, pairing peers.Pairing) {
	t.Helper()
	prompt := "explain leases to a five-year-old"
	site := peers.StartSite(t, peers.SiteOptions{
		Relay: w.Origin, SiteID: siteID, Keys: w.Site.Keys, Owner: owner, Prompt: prompt,
	})
	enqueued := site.Enqueued(t)
	done := site.Result(t)
	if done.JobID != enqueued.JobID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the site completed %+v, want ok %q", done, fakellm.Answer(prompt))
	}
	if p := done.Provenance; p == nil || p.RunnerID != pairing.RunnerID || p.RunnerOwner != owner ||
		p.Model != model.Name || p.BackendClass != "http" {
		t.Fatalf("provenance %+v, want the real daemon %s of %s on %s", done.Provenance, pairing.RunnerID, owner, model.Name)
	}
	if got := model.Prompts(); !slices.Equal(got, []string{prompt}) {
		t.Fatalf("the model was asked %q, want exactly the prompt", got)
	}
	if got := daemon.Finished(t, enqueued.JobID); got != "ok" {
		t.Fatalf("daemon finished with %s", got)
	}
	for _, ev := range daemon.RunnerEvents(t) {
		if ev.Type == "refused" || ev.Type == "grant-refused" || ev.Type == "error" {
			t.Fatalf("daemon reported %+v\n%s", ev, daemon.Log())
		}
	}
}
