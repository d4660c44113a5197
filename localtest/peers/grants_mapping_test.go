package peers_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// decisionLog keeps the relay's JSON decision records.
type decisionLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *decisionLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// declined is the reason of the last grant-declined record for jobID, ""
// when there is none.
func (l *decisionLog) declined(jobID string) (reason string, permanent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var rec struct {
			Decision  string `json:"decision"`
			Job       string `json:"job"`
			Reason    string `json:"reason"`
			Permanent bool   `json:"permanent"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Decision == "grant-declined" && rec.Job == jobID {
			reason, permanent = rec.Reason, rec.Permanent
		}
	}
	return reason, permanent
}

// The person chooses which service answers their work, with the real
// byollm 0.1.1 daemon: one device offering two openai-http services, alpha
// and beta (each on its own model, so the answer shows which ran), both
// answering llm.generate and llm.chat to the team, with the daemon's own
// default set to alpha (the default it keeps to itself). Unmapped, its
// owner's job is declined unmapped and waits; mapped to beta, a job runs on
// beta; remapped to alpha, the next runs on alpha. A teammate who mapped a
// same-named service in their own namespace is declined resolved-elsewhere
// on this device.
func TestARealDaemonRunsJobsOnTheMappedService(t *testing.T) {
	t.Parallel()
	origin, st, logs := startStackWithGrantsLogged(t)
	w := peers.NewWorld(t, origin)
	ctx := context.Background()
	if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: teammate, SiteID: siteID}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin.PutRoster(ctx, "alice-team", controlplane.RosterRequest{Owner: owner, Members: []string{teammate}}); err != nil {
		t.Fatal(err)
	}
	alpha, beta := peers.NewModel(t, "alpha-model"), peers.NewModel(t, "beta-model")
	daemon := peers.StartDaemon(t, peers.DaemonOptions{
		Origin: origin, Offer: protocol.AudienceTeam, Manual: true,
		Services: []peers.Service{{Name: "alpha", Model: alpha}, {Name: "beta", Model: beta}},
		Defaults: map[string]string{protocol.KindGenerate: "alpha", "llm.chat": "alpha"},
	})
	w.Approve(t, daemon.UserCode(t))
	pairing := daemon.Paired(t)
	if !pairing.ControlPlanePublic {
		t.Fatal("the daemon was not handed the control plane's key: it is in direct mode")
	}
	daemon.Tick(t) // its first heartbeat: what it advertises is known

	// Both jobs are published while their slots are mapped (with grants
	// on, the enqueue refuses an unmapped slot, slot-unsatisfiable, and a
	// slot whose service no live device of its owner advertises,
	// slot-waiting), and the choices change before any claim: the owner
	// unmaps theirs, as a consent made before mappings existed is; the
	// teammate maps "beta" in their own namespace, so this device's beta
	// is a lookalike on another person's machine.
	mapSlot(t, w, owner, "alpha", "")
	mapSlot(t, w, teammate, "beta", owner)
	unmapped := enqueueStub(t, w, owner, protocol.AudiencePrivate)
	elsewhere := enqueueStub(t, w, teammate, protocol.AudienceTeam)
	if _, err := w.Admin.Unmap(ctx, controlplane.UnmapRequest{Owner: owner, SiteID: siteID, Kind: protocol.KindGenerate}); err != nil {
		t.Fatal(err)
	}
	mapSlot(t, w, teammate, "beta", "")

	// Unmapped: the owner's own job is claimed, declined unmapped and put
	// back for this device, transiently; the daemon never sees it. The
	// admin API's view of the owner lists it as waiting on an unmapped
	// slot, with the services that could answer it.
	daemon.Tick(t)
	eventually(t, "both jobs to be declined and put back", func() bool {
		a, _, err := st.Store.Job(ctx, siteID, unmapped)
		b, _, err2 := st.Store.Job(ctx, siteID, elsewhere)
		return err == nil && err2 == nil && a.RetryAfter[pairing.RunnerID] > 0 && b.RetryAfter[pairing.RunnerID] > 0
	})
	if reason, permanent := logs.declined(unmapped); reason != "unmapped" || permanent {
		t.Fatalf("the unmapped job was declined %q (permanent %v), want unmapped", reason, permanent)
	}
	waitsFor(t, st, unmapped, pairing.RunnerID)
	view, err := w.Admin.Person(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Sites) != 1 || len(view.Sites[0].Waiting) != 1 || view.Sites[0].Waiting[0].JobID != unmapped ||
		len(view.Sites[0].Waiting[0].Candidates) != 2 {
		t.Fatalf("the admin view of %s: %+v, want %s waiting, answerable by alpha and beta", owner, view, unmapped)
	}
	if reason, permanent := logs.declined(elsewhere); reason != "resolved-elsewhere" || permanent {
		t.Fatalf("the teammate's job was declined %q (permanent %v), want resolved-elsewhere", reason, permanent)
	}
	waitsFor(t, st, elsewhere, pairing.RunnerID)

	// Mapped to beta: a job runs on beta, though the daemon's default is
	// alpha.
	daemon.Run(t)
	mapSlot(t, w, owner, "beta", "")
	ranOn(t, w, beta, "which model answers this")
	// Remapped to alpha: the next job runs on alpha.
	mapSlot(t, w, owner, "alpha", "")
	ranOn(t, w, alpha, "and this one")
	if got := beta.Prompts(); len(got) != 1 {
		t.Fatalf("beta was asked %q after the remap", got)
	}

	for _, ev := range daemon.RunnerEvents(t) {
		if ev.JobID == unmapped || ev.JobID == elsewhere {
			t.Fatalf("the daemon saw a declined job: %+v", ev)
		}
		if ev.Type == "refused" || ev.Type == "grant-refused" || ev.Type == "error" {
			t.Fatalf("daemon reported %+v\n%s", ev, daemon.Log())
		}
	}
}

// enqueueStub publishes a bare llm.generate stub for who (nobody seals
// it), due in 25 s: past its not-before for the device that declined it,
// so it is never offered again while the test runs.
func enqueueStub(t *testing.T, w *peers.World, who, audience string) string {
	t.Helper()
	jobID := "job-" + rand.Text()
	stub := w.Site.Stub(jobID, who, time.Now().Add(25*time.Second).UnixMilli())
	stub.Audience = audience
	var enqueued struct {
		State string `json:"state"`
	}
	call(t, w.Origin, w.Site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: pv(), SiteID: siteID, Stub: stub,
	}), &enqueued)
	if enqueued.State != "queued" {
		t.Fatalf("enqueue answered state %q", enqueued.State)
	}
	return jobID
}

// waitsFor checks jobID is queued with a not-before for runnerID and not
// refused by it: a transient decline.
func waitsFor(t *testing.T, st *lambdafn.Stack, jobID, runnerID string) {
	t.Helper()
	job, ok, err := st.Store.Job(context.Background(), siteID, jobID)
	if err != nil || !ok {
		t.Fatalf("job %s: %v, found %v", jobID, err, ok)
	}
	if job.ClaimedBy != nil || len(job.RefusedBy) != 0 || job.RetryAfter[runnerID] == 0 {
		t.Fatalf("job %+v, want queued with a not-before for %s and refused by nobody", job, runnerID)
	}
}

// ranOn has a real @byollm/server site publish one job for the owner and
// checks it came back answered by model, and only model was asked.
func ranOn(t *testing.T, w *peers.World, model *peers.Model, prompt string) {
	t.Helper()
	site := peers.StartSite(t, peers.SiteOptions{Relay: w.Origin, SiteID: siteID, Keys: w.Site.Keys, Owner: owner, Prompt: prompt})
	enqueued := site.Enqueued(t)
	done := site.Result(t)
	site.Stop(t)
	if done.JobID != enqueued.JobID || done.State != "ok" || done.Outcome == nil || done.Outcome.Text != fakellm.Answer(prompt) {
		t.Fatalf("the site completed %+v, want ok %q", done, fakellm.Answer(prompt))
	}
	if p := done.Provenance; p == nil || p.Model != model.Name {
		t.Fatalf("provenance %+v, want the job run on %s", done.Provenance, model.Name)
	}
	if got := model.Prompts(); !slices.Contains(got, prompt) {
		t.Fatalf("%s was asked %q, want %q among them", model.Name, got, prompt)
	}
}
