package sitestoretest

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// env is one case's world: a fresh, empty store and the clock it reads.
type env struct {
	*testing.T
	ctx context.Context
	clk *clock.Manual
	s   sitestore.Store
}

func newEnv(t *testing.T, h Harness) *env {
	e := &env{T: t, ctx: context.Background(), clk: clock.NewManual(Start)}
	e.s = h.New(t, e.clk)
	return e
}

func (e *env) now() int64 { return e.clk.Now().UnixMilli() }

func (e *env) advance(ms int64) { e.clk.Advance(time.Duration(ms) * time.Millisecond) }

// envelope is a stand-in ciphertext: the store never opens what it holds.
func envelope(id string) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{Ciphertext: "c-" + id, RecipientKeyID: "site", SenderKeyID: "site",
		Direction: protocol.DirectionPayload, DeadlineAt: Start.UnixMilli() + protocol.EnvelopeMaxAgeMs}
}

func job(id, owner string, deps ...string) sitestore.CreateInput {
	return sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: envelope(id), SizeClass: "small",
		Owner: owner, DependsOn: deps}
}

func (e *env) create(in sitestore.CreateInput) sitestore.Job {
	e.Helper()
	j, err := e.s.Create(e.ctx, in)
	if err != nil {
		e.Fatalf("create %s: %v", in.ID, err)
	}
	return j
}

func (e *env) get(id string) sitestore.Job {
	e.Helper()
	j, found, err := e.s.Get(e.ctx, id)
	if err != nil || !found {
		e.Fatalf("get %s: found=%v err=%v", id, found, err)
	}
	return j
}

func capability(kind, backend, scope string) protocol.Capability {
	return protocol.Capability{Kind: kind, Service: "primary", BackendID: backend,
		BackendClass: protocol.BackendClassOf[backend], Model: "m", OfferScope: scope}
}

// generate is a runner offering llm.generate privately on a free backend.
var generate = []protocol.Capability{capability(protocol.KindGenerate, "ollama", protocol.AudiencePrivate)}

func (e *env) claim(runner, owner string, max int, caps []protocol.Capability) []sitestore.Job {
	e.Helper()
	jobs, err := e.s.Claim(e.ctx, sitestore.ClaimInput{RunnerID: runner, RunnerOwner: owner, Capabilities: caps, Max: max, LeaseMs: 10_000})
	if err != nil {
		e.Fatalf("claim: %v", err)
	}
	return jobs
}

func (e *env) claimOne(runner, owner string) sitestore.Job {
	e.Helper()
	jobs := e.claim(runner, owner, 1, generate)
	if len(jobs) != 1 {
		e.Fatalf("claim by %s: got %d jobs, want 1", runner, len(jobs))
	}
	return jobs[0]
}

func ids(jobs []sitestore.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

func okOutcome() protocol.Outcome { return protocol.OKOutcome("done") }

func (e *env) complete(j sitestore.Job, runner string, outcome protocol.Outcome) sitestore.CompleteResult {
	e.Helper()
	res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{
		JobID: j.ID, RunnerID: runner, Holder: sitestore.HolderByLease(j.Lease.ID, runner),
		Outcome: outcome, Provenance: sitestore.Provenance{Audience: j.Audience, RunnerID: runner, RunnerOwner: "o",
			BackendClass: "http", Model: "m", Untrusted: j.Audience != protocol.AudiencePrivate},
	})
	if err != nil {
		e.Fatalf("complete %s: %v", j.ID, err)
	}
	return res
}

// renew is held's runner heartbeating its lease (10 s leases).
func (e *env) renew(runner string, held sitestore.Job) sitestore.RenewResult {
	e.Helper()
	res, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: runner, LeaseMs: 10_000,
		Leases: []protocol.GrantRef{{JobID: held.ID, LeaseID: held.Lease.ID}}})
	if err != nil {
		e.Fatalf("renew %s: %v", held.ID, err)
	}
	return res
}

func (e *env) state(id string) string {
	e.Helper()
	return e.get(id).State
}

func (e *env) wantState(id, want string) {
	e.Helper()
	if got := e.state(id); got != want {
		e.Fatalf("job %s is %s, want %s", id, got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
