package dynamo

import (
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
