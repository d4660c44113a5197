package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// wantEnvelope fails unless Get reads the job with its at-rest envelope
// (want) or with none at all (!want).
func (e *env) wantEnvelope(id string, want bool) {
	e.Helper()
	got := e.get(id).Envelope
	switch {
	case want && got != envelope(id):
		e.Fatalf("%s: envelope %+v, want the one it was created with", id, got)
	case !want && got != (protocol.SealedEnvelope{}):
		e.Fatalf("%s ended and still holds its envelope %+v", id, got)
	}
}

// envelopeCases: the at-rest envelope is there to hand the
// payload to a device; the write that ends a job (any way it ends) drops
// it, and a live job keeps it through every other write.
var envelopeCases = []testCase{
	{"a live job keeps its envelope through claim and renewal", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		if _, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: "r1", LeaseMs: 10_000,
			Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}}); err != nil {
			e.Fatal(err)
		}
		e.wantEnvelope("a", true)
	}},
	{"a completed job drops its envelope, whatever the outcome", func(e *env) {
		for _, c := range []struct {
			id      string
			outcome protocol.Outcome
		}{{"ok", okOutcome()}, {"failed", protocol.FailedOutcome("backend-down", "no", false)}, {"canceled", protocol.CanceledOutcome()}} {
			e.create(job(c.id, "alice"))
			j := e.claimOne("r1", "alice")
			if c.id == "canceled" {
				if _, _, err := e.s.Cancel(e.ctx, j.ID); err != nil {
					e.Fatal(err)
				}
				e.wantEnvelope(j.ID, true)
			}
			if res := e.complete(j, "r1", c.outcome); !res.Accepted {
				e.Fatalf("complete %s: %+v", c.id, res)
			}
			e.wantEnvelope(c.id, false)
		}
	}},
	{"a job cancelled while queued drops its envelope", func(e *env) {
		e.create(job("a", "alice"))
		if _, _, err := e.s.Cancel(e.ctx, "a"); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateCanceled)
		e.wantEnvelope("a", false)
	}},
	{"an expired job drops its envelope", func(e *env) {
		in := job("a", "alice")
		in.TTLMs = 1000
		e.create(in)
		e.advance(1000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateExpired)
		e.wantEnvelope("a", false)
	}},
	{"a cloud job ended without a device's result drops its envelope", func(e *env) {
		e.create(cloudJob("a"))
		if _, ended, err := e.s.End(e.ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "no", false), Reason: "evicted"}); err != nil || !ended {
			e.Fatalf("end: %v %v", ended, err)
		}
		e.wantEnvelope("a", false)
	}},
}
