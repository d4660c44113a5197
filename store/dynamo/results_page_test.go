package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// A site polling results many times a second writes its rotation item at
// most once a store.ResultsRotateMs, and the first poll of each bound
// writes it again, its moves back to the start included. The writes are
// what the request meter counts over the polls: a GET results page writes
// nothing but the rotation item.
func TestResultsRotationWritesOnceABound(t *testing.T) {
	ctx := context.Background()
	meter := &ddb.Meter{}
	clk := clock.NewManual(storetest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Options: store.Options{Clock: clk}, Meter: meter})
	if err != nil {
		t.Fatal(err)
	}
	const site, limit = "site", 5 // a page's rotation share is one result
	claim := store.ClaimInput{
		RunnerID: "runner", Owner: "alice",
		Device: protocol.PublicIdentity{Identity: "id-runner", Encryption: "enc-runner", EncryptionSig: "sig-runner"},
		Routes: []store.Route{{SiteID: site, Owner: "alice"}},
		Kinds:  []string{"llm.generate"},
		Max:    1, LeaseMs: 120_000,
	}
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		deadline := clock.EpochMs(clk.Now()) + 600_000
		envelope := func(direction string) protocol.SealedEnvelope {
			return protocol.SealedEnvelope{Ciphertext: "c", RecipientKeyID: "r", SenderKeyID: "s", Direction: direction, DeadlineAt: deadline}
		}
		if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: site, Stub: protocol.JobStub{
			ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: deadline,
		}}); err != nil {
			t.Fatal(err)
		}
		g, err := s.Claim(ctx, claim)
		if err != nil || len(g) != 1 {
			t.Fatalf("claim %s: %v %v", id, g, err)
		}
		if r, err := s.Seal(ctx, store.SealInput{SiteID: site, JobID: id, Envelope: envelope("payload")}); err != nil || r.Refused != "" {
			t.Fatalf("seal %s: %+v %v", id, r, err)
		}
		if r, err := s.TakePayload(ctx, store.HolderInput{JobID: id, RunnerID: "runner", LeaseID: g[0].Lease.ID}); err != nil || r.Envelope == nil {
			t.Fatalf("take %s: %+v %v", id, r, err)
		}
		if r, err := s.Complete(ctx, store.CompleteInput{JobID: id, RunnerID: "runner", LeaseID: g[0].Lease.ID,
			Envelope: envelope("result"), Disposition: store.DispositionOK}); err != nil || !r.Accepted {
			t.Fatalf("complete %s: %+v %v", id, r, err)
		}
		clk.Advance(time.Millisecond)
	}
	// None is fresh: every page needs the rotation, and three results on
	// a share of one never read to the end from the start.
	clk.Advance(store.ResultsFreshMs * time.Millisecond)
	const polls = 10
	step := store.ResultsRotateMs * time.Millisecond / polls
	for bound := range 2 * len(ids) {
		for poll := range polls {
			meter.Reset()
			if _, err := s.ResultsPage(ctx, site, limit); err != nil {
				t.Fatal(err)
			}
			want := 0.0
			if poll == 0 {
				want = 1 // the bound's first poll moves the rotation
			}
			if got := meter.Total().WriteUnits; got != want {
				t.Fatalf("bound %d, poll %d (%v apart) wrote %v WCU, want %v", bound, poll, step, got, want)
			}
			clk.Advance(step)
		}
	}
}
