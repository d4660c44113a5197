package store

import "errors"

// Refusal is why a store declined an operation. Refusals are answers, not
// failures: they are returned in the result beside a nil error, and a Go
// error from a store always means the store itself could not answer (I/O,
// a corrupt item it cannot route around).
//
// The relay maps them to wire bodies in one place (internal/relay/refusals.go).
type Refusal string

const (
	// RefusedNotFound: no job this caller holds or held by that id. Also the
	// answer for another site's job id, so a runner cannot probe other
	// tenants' namespaces.
	RefusedNotFound Refusal = "not-found"
	// RefusedNotHolder: the job exists under this lease but another runner
	// holds it.
	RefusedNotHolder Refusal = "not-holder"
	// RefusedStaleLease: this runner holds (or held) the job under a
	// different grant. A slow daemon is told its grant ended, not that the
	// job does not exist.
	RefusedStaleLease Refusal = "stale-lease"
	// RefusedNotReady: the site has not sealed yet; keep polling.
	RefusedNotReady Refusal = "not-ready"
	// RefusedTerminal: the job already finished; stop. Distinct from
	// not-ready, or a daemon would poll a finished job until its lease ran out.
	RefusedTerminal Refusal = "terminal"
	// RefusedTooLate: a seal for a job no longer awaiting its payload.
	RefusedTooLate Refusal = "too-late"
)

// ErrContention is an operation that lost to other writers more often than
// it would retry. Nothing was changed by the call, so the caller may simply
// try again; the relay answers 503 rather than 500 so clients do.
var ErrContention = errors.New("store: too much contention, nothing changed; try again")
