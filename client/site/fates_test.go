package site_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

func fates(rep site.Report) map[string]site.Fate {
	out := map[string]site.Fate{}
	for _, e := range rep.Ended {
		out[e.JobID] = e.Fate
	}
	return out
}

func (s setup) pump(t *testing.T) site.Report {
	t.Helper()
	rep, err := s.site.Pump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestEveryJobEndsInExactlyOneFateReportedOnce(t *testing.T) {
	s := newSetup(t)
	good := protocol.SealedOutcome{Outcome: protocol.OKOutcome("hi"), Ran: okRan}
	for _, id := range []string{"verified", "failed", "evicted", "cancelled"} {
		s.publishClaimed(t, id, "lease-"+id, protocol.GeneratePayload("hello"))
	}
	expiring := protocol.JobStub{ID: "expired", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Minute).UnixMilli()}
	if _, err := s.site.Publish(context.Background(), expiring, protocol.GeneratePayload("x")); err != nil {
		t.Fatal(err)
	}
	if rep := s.pump(t); len(rep.Sealed) != 4 || len(rep.Ended) != 0 {
		t.Fatalf("first pump %+v", rep)
	}
	if _, err := s.site.Cancel(context.Background(), "cancelled"); err != nil {
		t.Fatal(err)
	}
	s.relay.set(func(f *fakeRelay) {
		f.pending = nil
		f.results = []protocol.SiteResult{
			s.result(t, "verified", "lease-verified", "ok", s.device, s.device.Public(), good),
			s.result(t, "failed", "lease-failed", "ok", mustKeys(t), s.device.Public(), good),
			// After the cancel: not delivered, the job already ended.
			s.result(t, "cancelled", "lease-cancelled", "ok", s.device, s.device.Public(), good),
		}
		f.evicted = []string{"evicted", "someone-elses"}
	})
	s.clock.Advance(2 * time.Minute)
	rep := s.pump(t)
	want := map[string]site.Fate{"verified": site.FateVerified, "failed": site.FateFailed,
		"evicted": site.FateEvicted, "cancelled": site.FateCancelled, "expired": site.FateExpired}
	if got := fates(rep); len(rep.Ended) != len(want) || !maps.Equal(got, want) {
		t.Fatalf("ended %+v, want %v", rep.Ended, want)
	}
	if len(rep.Results) != 1 || rep.Results[0].JobID != "verified" {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, e := range rep.Ended {
		if (e.Fate == site.FateVerified) != (e.Result != nil) || (e.Fate != site.FateVerified && e.Reason == "") {
			t.Fatalf("ending %+v", e)
		}
	}
	if s.site.Pending() != 0 {
		t.Fatalf("pending = %d after every job ended", s.site.Pending())
	}
	// Reported once; what was listed is collected on the next call, and
	// another process's notice is left for it.
	if again := s.pump(t); len(again.Ended) != 0 || len(again.Results) != 0 || len(again.Refused) != 0 {
		t.Fatalf("second pump %+v", again)
	}
	s.relay.set(func(f *fakeRelay) {
		got := slices.Sorted(slices.Values(f.collected))
		if !slices.Equal(got, []string{"cancelled", "evicted", "failed", "verified"}) {
			t.Errorf("collected %v", got)
		}
	})
}

func TestAJobPublishedAgainAfterItWasEvictedIsANewJob(t *testing.T) {
	s := newSetup(t)
	s.publishClaimed(t, "j1", "lease-1", protocol.GeneratePayload("hello"))
	s.relay.set(func(f *fakeRelay) { f.pending, f.evicted = nil, []string{"j1"} })
	if got := fates(s.pump(t)); got["j1"] != site.FateEvicted {
		t.Fatalf("fates %v", got)
	}
	s.relay.set(func(f *fakeRelay) { f.evicted = nil })
	s.pump(t) // collects the notice
	s.publishClaimed(t, "j1", "lease-2", protocol.GeneratePayload("hello"))
	if rep := s.pump(t); len(rep.Sealed) != 1 || len(rep.Ended) != 0 {
		t.Fatalf("pump after republishing %+v", rep)
	}
	if s.site.Pending() != 1 {
		t.Fatalf("pending = %d", s.site.Pending())
	}
}

func TestRunSealsWhileCollectingIsStuck(t *testing.T) {
	s := newSetup(t)
	gate := make(chan struct{})
	s.relay.set(func(f *fakeRelay) { f.resultsGate = gate })
	defer close(gate)
	// Only a run that never seals reaches this; a loaded machine's slow
	// one does not.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sealed := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.site.Run(ctx, 5*time.Millisecond, func(rep site.Report) {
			for _, id := range rep.Sealed {
				sealed <- id
			}
		})
	}()
	// The results half is now held by the relay; a claim must still be
	// sealed.
	s.publishClaimed(t, "j1", "lease-1", protocol.GeneratePayload("hello"))
	select {
	case id := <-sealed:
		if id != "j1" {
			t.Fatalf("sealed %s", id)
		}
	case <-ctx.Done():
		t.Fatal("nothing was sealed while collecting was stuck")
	}
	cancel()
	if err := <-done; err != context.Canceled && err != context.DeadlineExceeded {
		t.Fatalf("run = %v", err)
	}
}

// A job expires here once a results poll sent protocol.ExpiryMarginMs
// after its deadline was answered without it: a result the relay accepted
// in the deadline's last instant (by the relay's clock), after the site's
// previous poll, is in that answer. While the relay does not answer, the
// job waits for protocol.ResultGraceMs past the deadline, after which no
// relay lists its result, and then expires.
func TestAJobExpiresOnAPollPastItsDeadlineOrAfterGrace(t *testing.T) {
	s := newSetup(t)
	deadline := start.Add(time.Minute)
	for _, id := range []string{"j1", "j2"} {
		stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: deadline.UnixMilli()}
		if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x")); err != nil {
			t.Fatal(err)
		}
	}
	s.clock.Set(deadline.Add(-time.Millisecond))
	if rep := s.pump(t); len(rep.Ended) != 0 {
		t.Fatalf("ended before the deadline: %+v", rep.Ended)
	}
	// The relay stops answering; the deadline passes.
	s.relay.set(func(f *fakeRelay) {
		f.refuse["results"] = fakeRefusal{status: 503, body: `{"error":"unavailable","message":"later"}`}
	})
	s.clock.Set(deadline.Add(protocol.ResultGraceMs*time.Millisecond - time.Millisecond))
	if rep := s.pump(t); len(rep.Ended) != 0 || rep.Deferred == "" {
		t.Fatalf("with no answer since the deadline, within the grace: %+v", rep)
	}
	s.clock.Advance(time.Millisecond)
	if rep := s.pump(t); len(rep.Ended) != 2 {
		t.Fatalf("with no answer, at the grace's end: %+v", rep)
	}

	// An answered poll sent the margin after the deadline ends the job at
	// once; one sent a millisecond sooner does not.
	late := start.Add(time.Hour)
	stub := protocol.JobStub{ID: "answered-later", Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: late.UnixMilli()}
	if _, err := s.site.Publish(context.Background(), stub, protocol.GeneratePayload("x")); err != nil {
		t.Fatal(err)
	}
	s.relay.set(func(f *fakeRelay) { delete(f.refuse, "results") })
	s.clock.Set(late.Add(protocol.ExpiryMarginMs*time.Millisecond - time.Millisecond))
	if rep := s.pump(t); len(rep.Ended) != 0 {
		t.Fatalf("ended by a poll sent within the margin: %+v", rep.Ended)
	}
	s.clock.Advance(time.Millisecond)
	if got := fates(s.pump(t)); got["answered-later"] != site.FateExpired {
		t.Fatalf("fates after an answered poll at the deadline plus the margin: %v", got)
	}
}
