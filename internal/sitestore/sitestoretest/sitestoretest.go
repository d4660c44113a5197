// Package sitestoretest is the one behaviour suite every sitestore.Store
// implementation must pass, the way store/storetest serves the relay's
// stores: a behaviour is asserted here once and holds for the memory store
// and the DynamoDB store alike. Time moves by the injected
// clock.Manual, never by sleeping.
//
// What it cannot prove: that a store applies a rule atomically across
// replicas. The concurrency cases race goroutines on one store, which a
// read-decide-write store fails often but not always; interleavings across
// replicas belong with the implementation that has a network in it.
package sitestoretest

import (
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
)

// Harness builds stores for the suite.
type Harness struct {
	// New returns a fresh, empty store, isolated from every other store the
	// suite builds, that tells the time by clock, which the suite moves.
	// Register any teardown with t.Cleanup.
	New func(t *testing.T, clk *clock.Manual) sitestore.Store
}

// Start is where every case's clock begins: a fixed instant, so the numbers
// in a failure are readable.
var Start = time.UnixMilli(1_800_000_000_000)

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
		{"create", createCases},
		{"claim", claimCases},
		{"lease", leaseCases},
		{"complete", completeCases},
		{"expiry", expiryCases},
		{"cancel", cancelCases},
		{"pairing", pairingCases},
		{"concurrency", concurrencyCases},
		{"cloud", cloudCases},
		{"cloud jobs", cloudJobCases},
		{"holder", holderCases},
		{"envelope", envelopeCases},
		{"checkpoint", checkpointCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					c.run(newEnv(t, h))
				})
			}
		})
	}
}
