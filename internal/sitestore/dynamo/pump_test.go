package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// TestThePumpsWorkIsTheCloudJobsNotEnded: a cloud-lane job is work while
// it waits to be published and while it is published and not ended; it
// stops being work when it ends. A direct-lane job is never the pump's.
func TestThePumpsWorkIsTheCloudJobsNotEnded(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	work := func() Work {
		t.Helper()
		w, err := s.Work(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := work(); !w.Idle() {
		t.Fatalf("an empty table: %+v, want idle", w)
	}
	create := func(id string, cloud bool) {
		t.Helper()
		env := protocol.SealedEnvelope{Ciphertext: "c-" + id, RecipientKeyID: "site", SenderKeyID: "site",
			Direction: protocol.DirectionPayload, DeadlineAt: clk.Now().UnixMilli() + protocol.EnvelopeMaxAgeMs}
		if _, err := s.Create(ctx, sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: env, SizeClass: "small",
			Owner: "alice", Audience: protocol.AudienceTeam, TTLMs: 60_000, AwaitingPublish: cloud}); err != nil {
			t.Fatal(err)
		}
	}
	create("direct", false)
	if w := work(); !w.Idle() {
		t.Fatalf("a direct-lane job: %+v, want idle", w)
	}
	created := clk.Now().UnixMilli()
	create("cloud", true)
	if w := work(); w.Unpublished != 1 || w.OldestUnpublishedAt != created || w.InFlight {
		t.Fatalf("a job to publish: %+v, want one unpublished since %d", w, created)
	}
	if _, ok, err := s.MarkPublished(ctx, "cloud"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if w := work(); w.Unpublished != 0 || !w.InFlight {
		t.Fatalf("a published job: %+v, want in flight", w)
	}
	if _, ended, err := s.End(ctx, sitestore.EndInput{JobID: "cloud", Outcome: protocol.FailedOutcome("test", "ended by the test", false), Reason: "test"}); err != nil || !ended {
		t.Fatal(ended, err)
	}
	if w := work(); !w.Idle() {
		t.Fatalf("an ended job: %+v, want idle", w)
	}
}

// TestThePumpLeaseHasOneHolder: the lease is taken by one holder until it
// lapses or is released, renewed only by its holder, passed only by it,
// and keeps one pending wake-up across holders.
func TestThePumpLeaseHasOneHolder(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	take := func(holder string, want bool) {
		t.Helper()
		if ok, err := s.TakePumpLease(ctx, holder, 5000); err != nil || ok != want {
			t.Fatalf("%s takes the lease: %v %v, want %v", holder, ok, err, want)
		}
	}
	claim := func(at, now int64, want bool) {
		t.Helper()
		if ok, err := s.ClaimPumpWake(ctx, at, now); err != nil || ok != want {
			t.Fatalf("claim a wake-up at %d, at %d: %v %v, want %v", at, now, ok, err, want)
		}
	}
	// A wake-up recorded before any lease: the item holds only it, and the
	// lease is still free to take.
	claim(10, 0, true)
	claim(11, 9, false) // 10 is pending
	take("a", true)
	take("b", false)
	take("a", true)     // a renewal
	claim(42, 10, true) // 10's time has come: whoever asks arms the next
	claim(43, 41, false)
	clk.Advance(5001 * time.Millisecond)
	take("b", true) // a's lapsed
	if ok, err := s.PassPumpLease(ctx, "a", "c", 5000); err != nil || ok {
		t.Fatalf("a passed a lease it no longer holds: %v %v", ok, err)
	}
	if ok, err := s.PassPumpLease(ctx, "b", "c", 5000); err != nil || !ok {
		t.Fatal(ok, err)
	}
	take("b", false)
	if err := s.DropPumpLease(ctx, "b"); err != nil { // not b's: nothing
		t.Fatal(err)
	}
	take("d", false)
	if err := s.DropPumpLease(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	l, found, err := s.PumpLeaseNow(ctx)
	if err != nil || !found || l.Until != 0 || l.WakeAt != 42 {
		t.Fatalf("released lease %+v (found %v, %v), want released with the wake-up kept", l, found, err)
	}
	take("d", true)
	// A wake-up the Scheduler refused is forgotten only while it is the
	// one recorded; then the slot is free before its time.
	if err := s.ForgetPumpWake(ctx, 41); err != nil {
		t.Fatal(err)
	}
	claim(44, 41, false)
	if err := s.ForgetPumpWake(ctx, 42); err != nil {
		t.Fatal(err)
	}
	claim(44, 41, true)
}
