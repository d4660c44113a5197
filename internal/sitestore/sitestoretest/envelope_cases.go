package sitestoretest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// wantEnvelope fails unless Get reads the job with its at-rest envelope
// (want) or with none at all (!want).
func wantEnvelope(t *testing.T, e Env, id string, want bool) {
	t.Helper()
	got := e.get(t, id).Envelope
	switch {
	case want && got != envelope(id):
		t.Fatalf("%s: envelope %+v, want the one it was created with", id, got)
	case !want && got != (protocol.SealedEnvelope{}):
		t.Fatalf("%s ended and still holds its envelope %+v", id, got)
	}
}

// envelopeCases: the at-rest envelope is there to hand the
// payload to a device; the write that ends a job (any way it ends) drops
// it, and a live job keeps it through every other write.
func envelopeCases() []testCase {
	return []testCase{
		{"a live job keeps its envelope through claim and renewal", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			if _, err := e.Store.RenewLeases(ctx, sitestore.RenewInput{RunnerID: "r1", LeaseMs: 10_000,
				Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}}); err != nil {
				t.Fatal(err)
			}
			wantEnvelope(t, e, "a", true)
		}},
		{"a completed job drops its envelope, whatever the outcome", func(t *testing.T, e Env) {
			for _, c := range []struct {
				id      string
				outcome protocol.Outcome
			}{{"ok", okOutcome()}, {"failed", protocol.FailedOutcome("backend-down", "no", false)}, {"canceled", protocol.CanceledOutcome()}} {
				e.create(t, job(c.id, "alice"))
				j := e.claimOne(t, "r1", "alice")
				if c.id == "canceled" {
					if _, _, err := e.Store.Cancel(ctx, j.ID); err != nil {
						t.Fatal(err)
					}
					wantEnvelope(t, e, j.ID, true)
				}
				if res := e.complete(t, j, "r1", c.outcome); !res.Accepted {
					t.Fatalf("complete %s: %+v", c.id, res)
				}
				wantEnvelope(t, e, c.id, false)
			}
		}},
		{"a job cancelled while queued drops its envelope", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			if _, _, err := e.Store.Cancel(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateCanceled)
			wantEnvelope(t, e, "a", false)
		}},
		{"an expired job drops its envelope", func(t *testing.T, e Env) {
			in := job("a", "alice")
			in.TTLMs = 1000
			e.create(t, in)
			e.advance(1000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateExpired)
			wantEnvelope(t, e, "a", false)
		}},
		{"a cloud job ended without a device's result drops its envelope", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			if _, ended, err := e.Store.End(ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "no", false), Reason: "evicted"}); err != nil || !ended {
				t.Fatalf("end: %v %v", ended, err)
			}
			wantEnvelope(t, e, "a", false)
		}},
	}
}
