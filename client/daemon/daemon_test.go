package daemon_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

func TestAPairedDaemonRunsAJobAndTheSiteVerifiesItOnce(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{})

	if got := d.Pairing(); got.RunnerID != "runner-a" || got.Owner != "alice" || len(got.Sites) != 1 {
		t.Fatalf("pairing = %+v", got)
	}
	if _, pinned := d.Pairing().Sites[s.KeyID()]; !pinned {
		t.Fatalf("the site's key %s was not pinned at pairing", s.KeyID())
	}

	w.publish(s, "job-1", "alice", protocol.GeneratePayload("hello"))
	if n := w.tick(d); n != 1 {
		t.Fatalf("claimed %d jobs, want 1", n)
	}
	rep := w.pump(s)
	if len(rep.Sealed) != 1 || rep.Sealed[0] != "job-1" {
		t.Fatalf("sealed %v, want [job-1]", rep.Sealed)
	}
	d.events.waitFor(t, daemon.EventReported, "job-1")

	rep = w.pump(s)
	results := w.delivered[s]
	if len(results) != 1 {
		t.Fatalf("results %+v, refused %+v", results, rep.Refused)
	}
	r := results[0]
	if r.JobID != "job-1" || r.Outcome.Outcome != protocol.DispositionOK || r.Outcome.TextOrEmpty() != "echo: hello" {
		t.Fatalf("result = %+v", r)
	}
	if r.DeviceKeyID != d.keys.KeyID() || r.RunnerID != "runner-a" || r.RunnerOwner != "alice" {
		t.Fatalf("result names device %s runner %s owner %s; want %s runner-a alice", r.DeviceKeyID, r.RunnerID, r.RunnerOwner, d.keys.KeyID())
	}
	if r.Ran.Model != "echo" || r.Ran.BackendClass != "http" || r.Ran.Stop != "end" || r.Ran.StopReported == nil || !*r.Ran.StopReported {
		t.Fatalf("ran = %+v", r.Ran)
	}
	if r.Untrusted {
		t.Fatal("a private job's result is marked untrusted")
	}

	// The relay serves finished jobs until their deadline; the site delivers
	// each once.
	if rep := w.pump(s); len(w.delivered[s]) != 1 || len(rep.Refused) != 0 {
		t.Fatalf("pumps delivered %+v, refused %+v", w.delivered[s], rep.Refused)
	}
}

func TestAChatJobReachesTheBackendAsLabelledTurns(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{})

	system := "be brief"
	p := protocol.ChatPayload(protocol.ChatMessage{Role: "user", Content: "hi"}, protocol.ChatMessage{Role: "assistant", Content: "hello"})
	p.System = &system
	w.publish(s, "chat-1", "alice", p)
	w.tick(d)
	w.pump(s)
	d.events.waitFor(t, daemon.EventReported, "chat-1")
	w.pump(s)
	want := "echo: System instructions:\nbe brief\n\nUser: hi\n\nAssistant: hello"
	if got := w.delivered[s]; len(got) != 1 || got[0].Outcome.TextOrEmpty() != want {
		t.Fatalf("results %+v, want text %q", got, want)
	}
}

func TestACancelledJobIsStoppedAndReportedAsCanceled(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{Backend: blockingBackend{}})

	w.publish(s, "job-1", "alice", protocol.GeneratePayload("hang on"))
	w.tick(d)
	w.pump(s)
	d.events.waitFor(t, daemon.EventRunning, "job-1")

	if cancelled, err := s.Cancel(w.ctx, "job-1"); err != nil || !cancelled {
		t.Fatalf("cancel = %v, %v", cancelled, err)
	}
	w.tick(d) // the heartbeat names the cancelled lease
	d.events.waitFor(t, daemon.EventCancelled, "job-1")
	d.events.waitFor(t, daemon.EventReported, "job-1")
	// The site ended the job when it cancelled it: the device's "canceled"
	// report is collected, not delivered as a second fate.
	rep := w.pump(s)
	if got := w.delivered[s]; len(got) != 0 || len(rep.Ended) != 1 || rep.Ended[0].Fate != site.FateCancelled {
		t.Fatalf("results %+v, ended %+v, refused %+v", got, rep.Ended, rep.Refused)
	}
}

func TestLapsedLeaseMovesOnAndTheFirstNeverReports(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	first := w.pairDaemon("alice", "runner-a", daemon.Config{Backend: blockingBackend{}})
	second := w.pairDaemon("alice", "runner-b", daemon.Config{})

	w.publish(s, "job-1", "alice", protocol.GeneratePayload("hang, then echo"))
	if n := w.tick(first); n != 1 {
		t.Fatalf("first claimed %d", n)
	}
	w.pump(s)
	first.events.waitFor(t, daemon.EventRunning, "job-1")

	// The first device goes silent (no heartbeat renews its lease) and the
	// lease lapses on the relay's clock.
	w.clock.Advance(61 * time.Second)
	if n := w.tick(second); n != 1 {
		t.Fatalf("second claimed %d after the lease lapsed, want 1", n)
	}
	w.pump(s)
	second.events.waitFor(t, daemon.EventReported, "job-1")

	// The first device wakes: its heartbeat learns the lease is lost, and it
	// stops without reporting.
	w.tick(first)
	first.events.waitFor(t, daemon.EventLost, "job-1")
	if err := first.Shutdown(w.ctx); err != nil {
		t.Fatal(err)
	}
	if first.events.has(daemon.EventReported, "job-1") {
		t.Fatal("the device that lost the lease reported a result")
	}

	rep := w.pump(s)
	got := w.delivered[s]
	if len(got) != 1 || got[0].RunnerID != "runner-b" || got[0].DeviceKeyID != second.keys.KeyID() {
		t.Fatalf("results %+v, refused %+v", got, rep.Refused)
	}
	if got[0].Outcome.TextOrEmpty() != "echo: hang, then echo" {
		t.Fatalf("text = %q", got[0].Outcome.TextOrEmpty())
	}
}

func TestShutdownReleasesSoAnotherDeviceTakesTheJob(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	first := w.pairDaemon("alice", "runner-a", daemon.Config{Backend: blockingBackend{}})
	second := w.pairDaemon("alice", "runner-b", daemon.Config{})

	w.publish(s, "job-1", "alice", protocol.GeneratePayload("hang"))
	w.tick(first)
	w.pump(s)
	first.events.waitFor(t, daemon.EventRunning, "job-1")
	if err := first.Shutdown(w.ctx); err != nil {
		t.Fatal(err)
	}
	if first.events.has(daemon.EventReported, "job-1") {
		t.Fatal("a job stopped by shutdown was reported")
	}
	if n := w.tick(second); n != 1 {
		t.Fatalf("second claimed %d right after the release, want 1", n)
	}
	if n, err := first.Tick(w.ctx); err != nil || n != 0 {
		t.Fatalf("a shut-down daemon claimed %d (%v)", n, err)
	}
}

func TestNoControlPlaneKeyRefusesAnotherPersonsJob(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	w.consent("bob", "shop")
	// Alice's roster lets her devices be offered Bob's team jobs; the device
	// itself has no way to check who Bob is, so it refuses.
	if _, _, err := w.admin.PutRoster(w.ctx, "team", "alice", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	d := w.pairDaemon("alice", "runner-a", daemon.Config{OfferScope: "team"})

	stub := jobStub(w, "job-1", "bob")
	stub.Audience = "team"
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload("for bob")); err != nil {
		t.Fatal(err)
	}
	if n := w.tick(d); n != 1 {
		t.Fatalf("claimed %d, want the roster route to offer it", n)
	}
	e := d.events.waitFor(t, daemon.EventRefused, "job-1")
	d.events.waitFor(t, daemon.EventReleased, "job-1")
	if e.Detail == "" {
		t.Fatal("a refusal without a reason")
	}
	// Released as refused: never offered to this device again.
	if n := w.tick(d); n != 0 {
		t.Fatalf("the refused job was offered again (%d)", n)
	}
	if rep := w.pump(s); len(rep.Sealed) != 0 {
		t.Fatalf("the site sealed a refused job: %v", rep.Sealed)
	}
}

func TestARevokedDeviceStops(t *testing.T) {
	w := newWorld(t)
	w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{})
	w.tick(d)
	if _, _, err := w.admin.RevokeDevice(w.ctx, "runner-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Tick(w.ctx); !errors.Is(err, daemon.ErrRevoked) {
		t.Fatalf("tick after revocation = %v, want ErrRevoked", err)
	}
	if err := d.Run(w.ctx); !errors.Is(err, daemon.ErrRevoked) {
		t.Fatalf("run after revocation = %v, want ErrRevoked", err)
	}
}

func TestAnUnpairedDaemonDoesNotTick(t *testing.T) {
	w := newWorld(t)
	d := w.newDaemon(daemon.Config{})
	if _, err := d.Tick(w.ctx); !errors.Is(err, daemon.ErrNotPaired) {
		t.Fatalf("tick = %v, want ErrNotPaired", err)
	}
}

func TestAnUnsealedPayloadIsGivenUpWithinTheLease(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	// Each wait moves the shared clock by what it asked for, so the daemon's
	// bound on waiting for a payload is reached without real waiting.
	d := w.pairDaemon("alice", "runner-a", daemon.Config{Sleep: func(ctx context.Context, dur time.Duration) error {
		w.clock.Advance(dur)
		return quickSleep(ctx, dur)
	}})
	w.publish(s, "job-1", "alice", protocol.GeneratePayload("never sealed"))
	claimedAt := w.clock.Now()
	if n := w.tick(d); n != 1 {
		t.Fatalf("claimed %d", n)
	}
	e := d.events.waitFor(t, daemon.EventError, "job-1")
	if !strings.Contains(e.Detail, "attempt 1 of 3") {
		t.Fatalf("error = %q, want the first of three attempts", e.Detail)
	}
	if waited := w.clock.Now().Sub(claimedAt); waited > 31*time.Second {
		t.Fatalf("waited %v for the payload, more than the 30 s bound", waited)
	}
	// Not refused yet: a slow seal is not a permanent refusal.
	if d.events.has(daemon.EventReleased, "job-1") || d.events.has(daemon.EventRefused, "job-1") {
		t.Fatal("the first give-up released the job")
	}
}

func jobStub(w *world, id, owner string) protocol.JobStub {
	return protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owner, Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli()}
}

func TestJobCancelledBeforeItsPayloadIsNeverSealed(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{})

	w.publish(s, "job-1", "alice", protocol.GeneratePayload("never mind"))
	w.tick(d)
	d.events.waitFor(t, daemon.EventWaiting, "job-1")
	if _, err := s.Cancel(w.ctx, "job-1"); err != nil {
		t.Fatal(err)
	}
	w.tick(d)
	d.events.waitFor(t, daemon.EventReported, "job-1")
	if d.events.has(daemon.EventOpened, "job-1") {
		t.Fatal("the device opened a payload for a cancelled job")
	}
	rep := w.pump(s)
	if len(rep.Sealed) != 0 || len(w.delivered[s]) != 0 || len(rep.Refused) != 0 {
		t.Fatalf("pump after the cancel: %+v", rep)
	}
}

func TestADeviceFollowsAPublishedSiteKeyRotation(t *testing.T) {
	w := newWorld(t)
	oldKeys := mustKeys(t)
	if _, _, err := w.admin.RegisterSite(w.ctx, "shop", oldKeys.Public()); err != nil {
		t.Fatal(err)
	}
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{})

	newKeys := mustKeys(t)
	link, err := protocol.SignSuccession(oldKeys, newKeys.Public())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.admin.RotateSite(w.ctx, "shop", newKeys.Public(), link); err != nil {
		t.Fatal(err)
	}
	w.tick(d) // the heartbeat carries the new key and the chain to it
	served := d.ServedSites()
	if len(served) != 2 || !contains(served, newKeys.KeyID()) || !contains(served, oldKeys.KeyID()) {
		t.Fatalf("serving %v, want the new key %s and the retiring old one", served, newKeys.KeyID())
	}

	s, err := site.New(site.Config{RelayURL: w.url, SiteID: "shop", Keys: newKeys, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	w.publish(s, "job-1", "alice", protocol.GeneratePayload("after the rotation"))
	w.tick(d)
	w.pump(s)
	d.events.waitFor(t, daemon.EventReported, "job-1")
	w.pump(s)
	if got := w.delivered[s]; len(got) != 1 || got[0].Outcome.TextOrEmpty() != "echo: after the rotation" {
		t.Fatalf("results %+v", got)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
