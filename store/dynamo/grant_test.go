package dynamo

import (
	"context"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// TestHolderCallsAnswerTheSameOnEveryReplica drives fetch, result,
// renewal and release through their answers and refusals on a replica that
// did not make the claims, and so learns each lease's site tag from the
// table rather than from its cache, and on the replica that did.
func TestHolderCallsAnswerTheSameOnEveryReplica(t *testing.T) {
	for _, cold := range []bool{false, true} {
		name := map[bool]string{false: "the-claiming-replica", true: "another-replica"}[cold]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewManual(storetest.Start)
			table := newTable(t)
			claimer := replica(t, table, store.Options{Clock: clk}, nil)
			s := claimer
			if cold {
				s = replica(t, table, store.Options{Clock: clk}, nil)
			}
			st := protocol.JobStub{ID: "a", Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
			if _, err := claimer.Enqueue(ctx, store.EnqueueInput{ID: "a", SiteID: "site", Stub: st}); err != nil {
				t.Fatal(err)
			}
			claim := func() string {
				t.Helper()
				g, err := claimer.Claim(ctx, faultClaim("r1"))
				if err != nil || len(g) != 1 {
					t.Fatalf("claim: %v %v", g, err)
				}
				return g[0].Lease.ID
			}
			seal := func() {
				t.Helper()
				if r, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}}); err != nil || r.Refused != "" {
					t.Fatalf("seal: %+v %v", r, err)
				}
			}
			take := func(runner, lease string, want store.Refusal) {
				t.Helper()
				r, err := s.TakePayload(ctx, store.HolderInput{JobID: "a", RunnerID: runner, LeaseID: lease})
				if err != nil || r.Refused != want || (want == "") != (r.Envelope != nil) {
					t.Fatalf("take(%s): %+v %v, want refusal %q", runner, r, err, want)
				}
			}
			complete := func(lease string, want store.CompleteResult) {
				t.Helper()
				r, err := s.Complete(ctx, store.CompleteInput{JobID: "a", RunnerID: "r1", LeaseID: lease,
					Envelope: protocol.SealedEnvelope{Ciphertext: "result"}, Disposition: store.DispositionOK})
				if err != nil || r != want {
					t.Fatalf("complete: %+v %v, want %+v", r, err, want)
				}
			}

			first := claim()
			take("r1", first, store.RefusedNotReady)
			seal()
			take("r2", first, store.RefusedNotHolder)
			take("r1", first, "")
			renewed, err := s.RenewLeases(ctx, store.RenewInput{RunnerID: "r1", LeaseMs: 60_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(renewed.Renewed) != 1 || len(renewed.Lost) != 0 {
				t.Fatalf("renew: %+v %v", renewed, err)
			}
			released, err := s.ReleaseLeases(ctx, store.ReleaseInput{RunnerID: "r1", Reason: store.ReleaseShutdown, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(released) != 1 {
				t.Fatalf("release: %v %v", released, err)
			}

			// The first grant is over; the same runner holds the job again.
			second := claim()
			seal()
			take("r1", first, store.RefusedStaleLease)
			complete(first, store.CompleteResult{Refused: store.RefusedStaleLease})
			renewed, err = s.RenewLeases(ctx, store.RenewInput{RunnerID: "r1", LeaseMs: 60_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(renewed.Renewed) != 0 || len(renewed.Lost) != 1 {
				t.Fatalf("renew of the first grant: %+v %v", renewed, err)
			}
			complete(second, store.CompleteResult{Accepted: true, State: store.StateDone})
			complete(second, store.CompleteResult{Duplicate: true, State: store.StateDone})
			take("r1", second, store.RefusedTerminal)
			if r, err := s.TakePayload(ctx, store.HolderInput{JobID: "b", RunnerID: "r1", LeaseID: second}); err != nil || r.Refused != store.RefusedNotFound {
				t.Fatalf("take of another job id: %+v %v", r, err)
			}
		})
	}
}
