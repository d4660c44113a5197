package siteserver_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// The cloud lane takes the job shapes the direct lane takes: dependencies
// and a roster, each through a real relay (internal/relay over HTTP) with
// Go daemons.

// relaySaw reports whether the relay ever queued the job: its store keeps
// every job it was sent until the job's deadline.
func (w *cloudWorld) relaySaw(id string) bool {
	w.t.Helper()
	_, found, err := w.relayStore.Job(w.ctx, "shop", id)
	if err != nil {
		w.t.Fatal(err)
	}
	return found
}

func (w *cloudWorld) enqueueInput(s *siteserver.Server, in siteserver.EnqueueInput) sitestore.Job {
	w.t.Helper()
	if in.Kind == "" {
		in.Kind = protocol.KindGenerate
	}
	if in.Owner == "" {
		in.Owner = "alice"
	}
	j, err := s.Enqueue(w.ctx, in)
	if err != nil {
		w.t.Fatalf("enqueue %s: %v", in.ID, err)
	}
	return j
}

func prompt(text string) json.RawMessage {
	raw, _ := json.Marshal(map[string]string{"prompt": text})
	return raw
}

// settleWith is settle with the given daemons ticking.
func (w *cloudWorld) settleWith(s *siteserver.Server, daemons []*daemon.Daemon, done func() bool) {
	w.t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		for _, d := range daemons {
			if _, err := d.Tick(w.ctx); err != nil {
				w.t.Fatalf("tick: %v", err)
			}
		}
		if _, err := s.Pump(w.ctx); err != nil {
			w.t.Fatalf("pump: %v", err)
		}
		if done() {
			return
		}
		time.Sleep(3 * time.Millisecond)
	}
	w.t.Fatal("the world did not settle")
}

// A chain of two: the dependent is published only once its dependency has
// completed ok, and then runs, so the two finish in order.
func TestACloudLaneChainRunsInOrderThroughTheRelay(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	w.enqueueInput(s, siteserver.EnqueueInput{ID: "draft", Payload: prompt("draft it")})
	review := w.enqueueInput(s, siteserver.EnqueueInput{ID: "review", Payload: prompt("review it"), DependsOn: []string{"draft"}})
	if review.ClaimableAt != 0 || siteserver.Waiting(review, review.CreatedAt) != siteserver.WaitingForDependencies {
		t.Fatalf("a dependent of an unfinished job is not held: %+v", review)
	}
	if _, err := s.Pump(w.ctx); err != nil {
		t.Fatal(err)
	}
	if !w.relaySaw("draft") || w.relaySaw("review") {
		t.Fatalf("after a pump the relay saw draft %v, review %v: want only the draft", w.relaySaw("draft"), w.relaySaw("review"))
	}
	// Until the draft is verified, however often the site pumps, the
	// review is not published.
	var draftDoneAt int64
	w.settle(s, func() bool {
		if siteserver.FateOf(w.job("draft")) == "" {
			if w.relaySaw("review") {
				t.Fatal("the review was published before the draft completed")
			}
			return false
		}
		if draftDoneAt == 0 {
			draftDoneAt = w.job("draft").UpdatedAt
		}
		return siteserver.FateOf(w.job("review")) != ""
	})
	w.wantVerified("draft", "draft it")
	w.wantVerified("review", "review it")
	r := w.job("review")
	if r.ClaimableAt < draftDoneAt || r.Attempts != 1 || w.job("draft").Attempts != 1 {
		t.Fatalf("review unblocked at %d, draft done at %d; attempts %d, %d", r.ClaimableAt, draftDoneAt, r.Attempts, w.job("draft").Attempts)
	}
	// Its stub carried the deadline the direct lane's rule gives a TTL
	// that starts once the job is unblocked.
	relayJob, _, err := w.relayStore.Job(w.ctx, "shop", "review")
	if err != nil {
		t.Fatal(err)
	}
	if want := r.ClaimableAt + r.TTLMs; relayJob.Stub.DeadlineAt != want {
		t.Fatalf("the review's stub deadline %d, want claimable %d + ttl %d", relayJob.Stub.DeadlineAt, r.ClaimableAt, r.TTLMs)
	}
}

// A dependent whose dependency ended other than ok never runs: it is never
// published, and it ends as a direct-lane job does, expired at its
// deadline, saying until then what it waits for.
func TestACloudLaneDependentOfAFailedJobEndsUnpublished(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	w.enqueueInput(s, siteserver.EnqueueInput{ID: "draft", Payload: prompt("draft it")})
	if _, _, err := s.Cancel(w.ctx, "draft"); err != nil {
		t.Fatal(err)
	}
	now := w.clock.Now().UnixMilli()
	w.enqueueInput(s, siteserver.EnqueueInput{ID: "review", Payload: prompt("review it"), DependsOn: []string{"draft"},
		DeadlineAt: now + 60_000})
	w.settle(s, func() bool { return w.job("draft").State == sitestore.StateCanceled })
	resp := s.HandleApp(w.ctx, siteserver.Request{Method: "POST", Path: "/app/job", Body: []byte(`{"jobId":"review","owner":"alice"}`)})
	if !strings.Contains(string(resp.Body), `"waiting":"`+siteserver.WaitingForDependencies+`"`) {
		t.Fatalf("the app's view of the held job: %d %s", resp.Status, resp.Body)
	}
	w.clock.Advance(61 * time.Second)
	w.settle(s, func() bool { return w.job("review").State == sitestore.StateExpired })
	if w.relaySaw("review") {
		t.Fatal("the relay was sent a job whose dependency was cancelled")
	}
	if j := w.job("review"); siteserver.FateOf(j) != site.FateExpired || len(j.SealedTo) != 0 || j.Attempts != 0 {
		t.Fatalf("the dependent ended %+v", j)
	}
}

// A roster is kept by the site and enforced where the site alone can: it
// seals the payload only to a device the roster names. A device outside it
// that claims the job gets nothing, and the job ends saying why (the relay
// re-offers a claim left unsealed to the same device only, so waiting
// would only end it later, as an eviction).
func TestACloudLaneRosterIsSealedOnlyToADeviceItNames(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	allow := []string{w.device2.RunnerID}

	// runner-a, not on the roster, is the only device asking.
	w.enqueueInput(s, siteserver.EnqueueInput{ID: "for-b", Payload: prompt("only b"), AudienceAllow: allow})
	w.settleWith(s, []*daemon.Daemon{w.daemon}, w.ended("for-b"))
	j := w.job("for-b")
	if !w.relaySaw("for-b") || len(j.SealedTo) != 0 || j.Attempts != 0 || siteserver.FateOf(j) != site.FateFailed ||
		j.Outcome == nil || j.Outcome.Code != "audience-refused" || !strings.Contains(j.EndReason, "runner-a") {
		t.Fatalf("a job claimed by a device its roster does not name: %+v", j)
	}
	if rj, _, err := w.relayStore.Job(w.ctx, "shop", "for-b"); err != nil || !rj.Cancelled || rj.Payload != nil {
		t.Fatalf("at the relay the refused job is %+v (%v): want it withdrawn, never sealed", rj, err)
	}

	// runner-b, on the roster, by its runner id and by its key id.
	for _, name := range []string{w.device2.RunnerID, w.device2.Keys.KeyID()} {
		id := "named-" + name[:8]
		w.enqueueInput(s, siteserver.EnqueueInput{ID: id, Payload: prompt("b runs it"), AudienceAllow: []string{name}})
		w.settleWith(s, []*daemon.Daemon{w.daemon2}, w.ended(id))
		j = w.job(id)
		if siteserver.FateOf(j) != site.FateVerified || w.answer(id) != echoOf("b runs it") ||
			j.Provenance.RunnerID != "runner-b" || j.Attempts != 1 ||
			!slices.Equal(j.SealedTo, []protocol.PublicIdentity{w.device2.Keys.Public()}) {
			t.Fatalf("a job whose roster names %s: %+v", name, j)
		}
	}
}

// A job published as a live stream is offered only to a device that opts
// in. When none claims it in StreamWaitNotice, the app's view of it says so
// and the log says so once.
func TestAStreamingJobNoDeviceTakesSaysSo(t *testing.T) {
	w := newCloudWorld(t) // its daemon does not opt in to streams
	var logged bytes.Buffer
	s, err := siteserver.New(siteserver.Config{Store: w.store, Keys: w.keys,
		Cloud:  &siteserver.CloudLane{RelayURL: w.url, SiteID: "shop"},
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	j := w.enqueueInput(s, siteserver.EnqueueInput{ID: "live", Payload: prompt("stream it"), Streaming: true})
	w.enqueueInput(s, siteserver.EnqueueInput{ID: "whole", Payload: prompt("answer it")})
	w.settle(s, w.ended("whole"))
	view := func() string {
		resp := s.HandleApp(w.ctx, siteserver.Request{Method: "POST", Path: "/app/job", Body: []byte(`{"jobId":"live","owner":"alice"}`)})
		return string(resp.Body)
	}
	if strings.Contains(view(), `"waiting"`) || strings.Contains(logged.String(), "waits") {
		t.Fatalf("a streaming job said it waits before the notice: %s\n%s", view(), logged.String())
	}
	w.clock.Advance(siteserver.StreamWaitNotice)
	for range 3 {
		if _, err := w.daemon.Tick(w.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pump(w.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.job("live"); got.State != sitestore.StateQueued || len(got.SealedTo) != 0 {
		t.Fatalf("a device that does not stream took a streaming job: %+v", got)
	}
	if !strings.Contains(view(), `"waiting":"`+siteserver.WaitingForStreamingDevice+`"`) {
		t.Fatalf("the app's view of the waiting job: %s", view())
	}
	if n := strings.Count(logged.String(), "job waits for a device that streams"); n != 1 || !strings.Contains(logged.String(), "job="+j.ID) {
		t.Fatalf("the log said it %d times:\n%s", n, logged.String())
	}
}
