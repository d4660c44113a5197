package store

// Churn thresholds: the report that names a site walking the fleet for
// device identities, beside the cap that slows it. An honest site never
// gets here: it seals within a round trip and the grant never reaches AwaitingPayloadMs. A
// site walking the fleet burns its UnsealedPerPair slots every ten seconds
// and crosses six in five minutes inside one.
const (
	// ChurnExpiries unsealed expiries of one pair inside ChurnWindowMs are
	// reported.
	ChurnExpiries = 6
	// ChurnWindowMs is the sliding window the expiries are counted in.
	ChurnWindowMs = 5 * 60_000
	// ChurnQuietMs is how long after a report a pair is not reported again:
	// an alert that repeats is an alert nobody reads.
	ChurnQuietMs = 60 * 60_000
)

// UnsealedChurn is a (site, job owner) pair that keeps claiming and not
// sealing.
type UnsealedChurn struct {
	SiteID string
	Owner  string
	// Expiries is how many unsealed grants expired inside the window,
	// counting the one that crossed the threshold.
	Expiries int
	WindowMs int64
}
