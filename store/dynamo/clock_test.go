package dynamo

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// skewedHost is a host clock off by skew. It drops the monotonic reading,
// so every duration the clock measures is the skewed wall clock's.
type skewedHost struct{ skew time.Duration }

func (h skewedHost) Now() time.Time { return time.Now().Add(h.skew).Round(0) }

// stridingHost reads stride later on every call: every round trip it
// times looks that long.
type stridingHost struct {
	mu     sync.Mutex
	now    time.Time
	stride time.Duration
}

func (h *stridingHost) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(h.stride)
	return h.now
}

// TestReplicasWithSkewedClocksDecideExpiriesAlike is
// two replicas over one DynamoDB Local table, one host 15 s fast, each with
// a ServerClock. DynamoDB Local stamps Date from this machine's clock, so
// it plays the service's clock. Both replicas see a claim's awaiting window
// open halfway through it and lapsed after it, and the fast one requeues
// it only then; a replica reading its fast host directly requeues it at
// once, which is what the ServerClock is for.
//
// "Still open" is asserted only for a halfway step that provably ran
// inside the window: one that ended, by this machine's clock, more than
// ddb.MaxClockUncertainty before the window's end. A step a loaded machine
// ran later than that could rightly see the window over, so it proves
// nothing; the scenario then runs again, on a fresh table with a wider
// window, and fails only when no window short of the skew fits the step.
func TestReplicasWithSkewedClocksDecideExpiriesAlike(t *testing.T) {
	// Every window stays short of the 15 s skew, so the naive replica
	// shows it.
	for _, window := range []time.Duration{6 * time.Second, 9 * time.Second, 12 * time.Second} {
		if skewedReplicasAgree(t, window) {
			return
		}
	}
	t.Fatal("every halfway step ended within the clock's uncertainty of its window's end: the machine was too slow to show anything")
}

// skewedReplicasAgree runs TestReplicasWithSkewedClocksDecideExpiriesAlike's
// scenario with an awaiting window of window, and reports false, having
// asserted nothing of the halfway step, when that step ran too late to
// tell an open window from a lapsed one.
func skewedReplicasAgree(t *testing.T, window time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	table := newTable(t)
	open := func(clk clock.Clock) *Store {
		// One due shard: the scheduled sweep Queries every shard of the due
		// index, and over the default count a loaded machine's sweep takes
		// longer than the whole window.
		s, err := New(Config{DB: localtest.DynamoClient(t), Table: table, DueShards: 1,
			Options: store.Options{Clock: clk, AwaitingPayloadMs: window.Milliseconds()}})
		if err != nil {
			t.Fatal(err)
		}
		// As lambdafn.Open does, and again while the clock is unsettled: one
		// response settles it only when its round trip is under a second,
		// which a loaded machine's DynamoDB Local does not always give.
		for i := 0; i == 0 || (i < 20 && s.server != nil && !s.server.Settled()); i++ {
			if err := s.CalibrateClock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	fast, fair := open(ddb.NewServerClock(skewedHost{15 * time.Second})), open(ddb.NewServerClock(nil))
	naive := open(skewedHost{15 * time.Second})
	replicas := map[string]*Store{"15 s fast": fast, "fair": fair}

	claim := func(id string) int64 {
		t.Helper()
		stub := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "BYOLLM-C", Audience: "team", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
		if _, err := fair.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: cSite, Stub: stub}); err != nil {
			t.Fatal(err)
		}
		granted, err := fair.Claim(ctx, store.ClaimInput{
			RunnerID: "r0", Owner: "alice", Device: protocol.PublicIdentity{Identity: "id-r0", Encryption: "e", EncryptionSig: "s"},
			Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 60_000, Routes: []store.Route{{SiteID: cSite, Owner: "alice"}},
		})
		if err != nil || len(granted) != 1 || granted[0].ID != id {
			t.Fatalf("claim %s: %v, %+v", id, err, granted)
		}
		awaiting, err := fair.Awaiting(ctx, cSite)
		if err != nil || len(awaiting) != 1 {
			t.Fatalf("awaiting: %v, %+v", err, awaiting)
		}
		return awaiting[0].AwaitingUntil
	}
	sweep := func(name string, s *Store) []store.Job {
		t.Helper()
		res, err := s.Sweep(ctx)
		if err != nil {
			t.Fatalf("%s replica's sweep: %v", name, err)
		}
		return res.Requeued
	}

	until := claim("job-skew-1")
	end := time.UnixMilli(until)
	// Halfway by the store clock that set the window, however long the
	// claim and the awaiting read took.
	time.Sleep(time.Duration(until-window.Milliseconds()/2-fair.now()) * time.Millisecond)
	for name, s := range replicas {
		got := sweep(name, s)
		now := s.now()
		// A settled replica reads within MaxClockUncertainty of the
		// server's clock, and every reading in the step came before this
		// instant of it, so the replica read a time before the window's
		// end only if the step ended more than that before it.
		margin := time.Until(end) - ddb.MaxClockUncertainty
		if margin <= 0 {
			t.Logf("%v window: the %s replica's halfway step ended with %v of the window left, no more than the clock's uncertainty %v (the machine ran it late); again with a wider window",
				window, name, margin+ddb.MaxClockUncertainty, ddb.MaxClockUncertainty)
			return false
		}
		t.Logf("%v window: the %s replica's halfway step ended %v clear of the window's end and its uncertainty", window, name, margin)
		if len(got) != 0 {
			t.Errorf("halfway through the window the %s replica requeued %v", name, got)
		}
		if now >= until {
			t.Errorf("halfway through the window the %s replica reads %d, past its end %d", name, now, until)
		}
		if r := s.server.Reading(); !r.Calibrated || r.Uncertainty > ddb.MaxClockUncertainty {
			t.Errorf("the %s replica's clock: %+v", name, r)
		}
	}
	// Read between two readings of the fair clock, so the time between the
	// calls, however long a loaded machine makes it, is not taken for a
	// difference of the clocks.
	before, f, after := fair.now(), fast.now(), fair.now()
	if lo, hi := before-2*ddb.MaxClockUncertainty.Milliseconds(), after+2*ddb.MaxClockUncertainty.Milliseconds(); f < lo || f > hi {
		t.Errorf("the fast replica's store clock reads %d, not within %v of the fair one's %d..%d", f, 2*ddb.MaxClockUncertainty, before, after)
	}
	t.Logf("15 s fast host: %+v; fair host: %+v", fast.server.Reading(), fair.server.Reading())

	time.Sleep(time.Until(end.Add(ddb.MaxClockUncertainty + 200*time.Millisecond)))
	for name, s := range replicas {
		if now := s.now(); now < until {
			t.Errorf("after the window the %s replica reads %d, before its end %d", name, now, until)
		}
	}
	if got := sweep("15 s fast", fast); len(got) != 1 || got[0].ID != "job-skew-1" {
		t.Fatalf("after the window the fast replica requeued %v, want job-skew-1", got)
	}
	if got := sweep("fair", fair); len(got) != 0 {
		t.Fatalf("the fair replica found %v still due after the fast one requeued it", got)
	}

	// The hazard, so this test would see it: a replica reading its fast
	// host calls a fresh window over at once.
	claim("job-skew-1")
	if got := sweep("naive 15 s fast", naive); len(got) != 1 {
		t.Fatalf("a replica reading its 15 s fast host requeued %v; the test no longer shows the skew", got)
	}
	return true
}

// TestASweepDecidesNoExpiryWhileTheClockIsUncertain gives a replica round
// trips of 3 s (a host clock that strides 3 s per reading), so the offset
// is never known within a second: the scheduled sweep refuses, the in-line
// sweep moves nothing, and the job stays claimed.
func TestASweepDecidesNoExpiryWhileTheClockIsUncertain(t *testing.T) {
	ctx := context.Background()
	table := newTable(t)
	fair := replica(t, table, store.Options{AwaitingPayloadMs: 1}, nil)
	slow := replica(t, table, store.Options{Clock: ddb.NewServerClock(&stridingHost{now: time.Now().Add(time.Hour), stride: 3 * time.Second}), AwaitingPayloadMs: 1}, nil)
	stub := protocol.JobStub{ID: "job-uncertain", Kind: "llm.generate", Owner: "alice", Site: "BYOLLM-C", Audience: "team", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
	if _, err := fair.Enqueue(ctx, store.EnqueueInput{ID: stub.ID, SiteID: cSite, Stub: stub}); err != nil {
		t.Fatal(err)
	}
	if _, err := fair.Claim(ctx, store.ClaimInput{
		RunnerID: "r0", Owner: "alice", Device: protocol.PublicIdentity{Identity: "id-r0", Encryption: "e", EncryptionSig: "s"},
		Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 60_000, Routes: []store.Route{{SiteID: cSite, Owner: "alice"}},
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the 1 ms window is over by every clock

	if _, err := slow.Sweep(ctx); !errors.Is(err, ErrClockUncertain) {
		t.Fatalf("sweep with 3 s round trips: %v, want ErrClockUncertain", err)
	}
	if res, err := slow.SweepInline(ctx); err != nil || len(res.Requeued)+len(res.Removed) != 0 {
		t.Fatalf("in-line sweep with 3 s round trips: %+v, %v; want nothing moved", res, err)
	}
	if r := slow.server.Reading(); !r.Calibrated || r.Uncertainty <= ddb.MaxClockUncertainty {
		t.Fatalf("the slow replica's clock: %+v", r)
	}
	// Still claimed: the replica whose clock is settled finds it due.
	if res, err := fair.Sweep(ctx); err != nil || len(res.Requeued) != 1 {
		t.Fatalf("a replica with a settled clock: %+v, %v; want the lapsed claim requeued", res, err)
	}
}
