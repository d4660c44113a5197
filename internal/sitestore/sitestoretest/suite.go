// Package sitestoretest is the one behaviour suite every sitestore.Store
// implementation passes, the way store/storetest serves the relay's
// stores: a behaviour is asserted here once and holds for the memory store
// and the DynamoDB store alike.
package sitestoretest

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// Start is where every suite clock starts: a fixed instant, so the numbers
// in a failure are readable.
var Start = time.UnixMilli(1_800_000_000_000)

// Env is one fresh, empty store and the manual clock it reads.
type Env struct {
	Store sitestore.Store
	Clock *clock.Manual
}

// Factory makes a fresh Env for one test. clock is the store's clock.
type Factory func(t *testing.T, clk *clock.Manual) sitestore.Store

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(Start)
			c.run(t, Env{Store: newStore(t, clk), Clock: clk})
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, e Env)
}

func cases() []testCase {
	var all []testCase
	all = append(all, createCases()...)
	all = append(all, claimCases()...)
	all = append(all, leaseCases()...)
	all = append(all, completeCases()...)
	all = append(all, expiryCases()...)
	all = append(all, cancelCases()...)
	all = append(all, pairingCases()...)
	all = append(all, concurrencyCases()...)
	all = append(all, cloudCases()...)
	all = append(all, holderCases()...)
	all = append(all, envelopeCases()...)
	all = append(all, checkpointCases()...)
	return all
}

// --- helpers -----------------------------------------------------------

var ctx = context.Background()

func (e Env) now() int64 { return e.Clock.Now().UnixMilli() }

func (e Env) advance(ms int64) { e.Clock.Advance(time.Duration(ms) * time.Millisecond) }

// envelope is a stand-in ciphertext: the store never opens what it holds.
func envelope(id string) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{Ciphertext: "c-" + id, RecipientKeyID: "site", SenderKeyID: "site",
		Direction: protocol.DirectionPayload, DeadlineAt: Start.UnixMilli() + protocol.EnvelopeMaxAgeMs}
}

func job(id, owner string, deps ...string) sitestore.CreateInput {
	return sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: envelope(id), SizeClass: "small",
		Owner: owner, DependsOn: deps}
}

func (e Env) create(t *testing.T, in sitestore.CreateInput) sitestore.Job {
	t.Helper()
	j, err := e.Store.Create(ctx, in)
	if err != nil {
		t.Fatalf("create %s: %v", in.ID, err)
	}
	return j
}

func (e Env) get(t *testing.T, id string) sitestore.Job {
	t.Helper()
	j, found, err := e.Store.Get(ctx, id)
	if err != nil || !found {
		t.Fatalf("get %s: found=%v err=%v", id, found, err)
	}
	return j
}

func capability(kind, backend, scope string) protocol.Capability {
	return protocol.Capability{Kind: kind, Service: "primary", BackendID: backend,
		BackendClass: protocol.BackendClassOf[backend], Model: "m", OfferScope: scope}
}

// generate is a runner offering llm.generate privately on a free backend.
var generate = []protocol.Capability{capability(protocol.KindGenerate, "ollama", protocol.AudiencePrivate)}

func (e Env) claim(t *testing.T, runner, owner string, max int, caps []protocol.Capability) []sitestore.Job {
	t.Helper()
	jobs, err := e.Store.Claim(ctx, sitestore.ClaimInput{RunnerID: runner, RunnerOwner: owner, Capabilities: caps, Max: max, LeaseMs: 10_000})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return jobs
}

func (e Env) claimOne(t *testing.T, runner, owner string) sitestore.Job {
	t.Helper()
	jobs := e.claim(t, runner, owner, 1, generate)
	if len(jobs) != 1 {
		t.Fatalf("claim by %s: got %d jobs, want 1", runner, len(jobs))
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

func (e Env) complete(t *testing.T, j sitestore.Job, runner string, outcome protocol.Outcome) sitestore.CompleteResult {
	t.Helper()
	res, err := e.Store.Complete(ctx, sitestore.CompleteInput{
		JobID: j.ID, RunnerID: runner, Holder: sitestore.HolderByLease(j.Lease.ID, runner),
		Outcome: outcome, Provenance: sitestore.Provenance{Audience: j.Audience, RunnerID: runner, RunnerOwner: "o",
			BackendClass: "http", Model: "m", Untrusted: j.Audience != protocol.AudiencePrivate},
	})
	if err != nil {
		t.Fatalf("complete %s: %v", j.ID, err)
	}
	return res
}

func (e Env) state(t *testing.T, id string) string {
	t.Helper()
	return e.get(t, id).State
}

func wantState(t *testing.T, e Env, id, want string) {
	t.Helper()
	if got := e.state(t, id); got != want {
		t.Fatalf("job %s is %s, want %s", id, got, want)
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
