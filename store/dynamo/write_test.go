package dynamo

import (
	"errors"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// TestALostAcknowledgementIsNotMistakenForALostRace loses the answer to the
// write that records a result, and then the read that would tell whether it
// committed: the retried write fails its condition on the write's own
// committed version, and the caller must still be told its result was
// accepted, not that it was a duplicate.
func TestALostAcknowledgementIsNotMistakenForALostRace(t *testing.T) {
	e := newFaultEnv(t)
	e.enqueue("a")
	g, err := e.clean.Claim(e.ctx, faultClaim("r1"))
	if err != nil || len(g) != 1 {
		t.Fatalf("claim: %v %v", g, err)
	}
	lease := g[0].Lease.ID
	if r, err := e.clean.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}}); err != nil || r.Refused != "" {
		t.Fatalf("seal: %+v %v", r, err)
	}
	// Complete reads the lease pointer and the job, writes, and reads the
	// job back after the lost acknowledgement.
	e.f.next("GetItem", noFault, noFault, throttled)
	e.f.next("PutItem", lostAck)
	done, err := e.s.Complete(e.ctx, store.CompleteInput{JobID: "a", RunnerID: "r1", LeaseID: lease,
		Envelope: protocol.SealedEnvelope{Ciphertext: "result"}, Disposition: store.DispositionOK})
	if err != nil || !done.Accepted || done.Duplicate {
		t.Fatalf("complete: %+v %v, want accepted", done, err)
	}
	if e.f.counts[lostAck] != 1 || e.f.counts[throttled] != 1 {
		t.Fatalf("faults injected %v, want one lost acknowledgement and one throttled read", e.f.counts)
	}
}

// A key past DynamoDB's size limit is refused outright, and retrying cannot
// change that: it is an error for the caller (a 500, a bug to fix), never
// the contention that tells a client to try again. The relay bounds every
// identifier before it gets here (internal/relay/bounds.go); this is the store's own
// answer when something slips past.
func TestAnOversizedKeyIsAnErrorNotContention(t *testing.T) {
	e := newFaultEnv(t)
	id := strings.Repeat("j", 3000)
	st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
	_, err := e.s.Enqueue(e.ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st})
	if err == nil || errors.Is(err, store.ErrContention) {
		t.Fatalf("enqueue with a 3,000-byte job id: %v, want an error that is not contention", err)
	}
}
