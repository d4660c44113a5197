// Package storetest is the one behaviour suite every store.RoutingStore (and
// store.PairingCodes) implementation must pass. A behaviour is asserted once,
// here, and holds for the memory store and the DynamoDB store alike.
//
// It ports every case of the reference relay's store contract (@byollm/relay
// 0.1.1) and every behaviour of its RoutingStore, and adds the
// timed rules the reference could only test with a movable clock: sweep,
// sticky re-offer, eviction, churn reporting and pairing-code expiry. Time
// moves by the injected clock.Manual, never by sleeping.
//
// What it cannot prove: CLAIM_ATOMIC under concurrency. One case claims from
// several goroutines at once, which a read-decide-write store fails often but
// not always; deterministic interleavings belong with the implementation
// that has a network in it.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/store"
)

// Store is what an implementation provides: routing and pairing codes, which
// live together because every replica must see the same ones.
type Store interface {
	store.RoutingStore
	store.PairingCodes
}

// Harness builds stores for the suite.
type Harness struct {
	// New returns a fresh, empty store, isolated from every other store the
	// suite builds, configured with opts. opts.Clock is always a
	// *clock.Manual the suite moves; opts.OnChurn and
	// opts.PairingCapacity are set by the cases that need them. Register any
	// teardown with t.Cleanup.
	New func(t *testing.T, opts store.Options) Store
	// Skip names cases ("group/case", as Run names them) this harness
	// cannot run, each with the reason, which the skip prints. A harness
	// that skips a case must run it in another configuration: the DynamoDB
	// store runs every case over one due shard, and skips, over many,
	// only the cases that pin which due items a bounded in-line sweep
	// picks across the whole store (it reads one shard a call).
	Skip map[string]string
}

// PresenceDropper is an optional test hook: lose a presence record the way a
// shared store does (a TTL, a restart). Cases that need it skip, saying so,
// when a store does not implement it.
type PresenceDropper interface {
	DropPresence(ctx context.Context, runnerID string) error
}

// RawStubWriter is an optional test hook for stores that keep stubs encoded:
// overwrite the stored stub of (siteID, jobID) with raw bytes, bypassing
// encoding, the way a previous version's rows look. An in-process store
// holds typed stubs and cannot reach that state, so the case skips for it
// (saying so, because a reader should know which half each store proves).
type RawStubWriter interface {
	WriteRawStub(ctx context.Context, siteID, jobID string, raw []byte) error
}

// Start is where every case's clock begins: a fixed, realistic wall time.
// The contract's not-before values are wall-clock instants, so the store
// clock must read like one.
var Start = time.Date(2026, time.November, 29, 8, 0, 0, 0, time.UTC)

// testCase is one behaviour.
type testCase struct {
	name string
	run  func(e *env)
}

// Run runs every case against the harness, each on a fresh store.
func Run(t *testing.T, h Harness) {
	groups := []struct {
		name  string
		cases []testCase
	}{
		{"enqueue", enqueueCases},
		{"claim", claimCases},
		{"holder", holderCases},
		{"release", releaseCases},
		{"seal", sealCases},
		{"complete", completeCases},
		{"cancel", cancelCases},
		{"fates", fatesCases},
		{"sweep", sweepCases},
		{"inline sweep", inlineSweepCases},
		{"churn", churnCases},
		{"presence", presenceCases},
		{"pairing", pairingCases},
		{"throttle", throttleCases},
		{"clock", clockCases},
		{"concurrency", concurrencyCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if why, ok := h.Skip[g.name+"/"+c.name]; ok {
						t.Skip(why)
					}
					c.run(newEnv(t, h))
				})
			}
		})
	}
}
