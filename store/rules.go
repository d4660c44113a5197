package store

import (
	"slices"

	"github.com/byorelay/byorelay/protocol"
)

// The routing rules both stores share. A store decides nothing of its own:
// it reads what a rule asks, calls the rule, and makes the outcome atomic
// in its own way. A rule written in each store would be two copies kept
// equal only by the shared suite, and a fix made in one would pass the
// suite on that store alone.

// Candidate is what the claim guards read of one job.
type Candidate struct {
	State State
	// Gone is a job the store no longer holds as live (deleted, or past
	// its retention) although an item of it is still read.
	Gone       bool
	SiteID     string
	Owner      string
	Kind       string
	Audience   string
	DeadlineAt int64
	ReofferTo  string
	RefusedBy  []string
	// RetryAfter is when the claiming device may be offered the job again
	// after declining it for something that may change; 0 for never
	// declined.
	RetryAfter int64
	Cancelled  bool
	// PairFull is a pair already sitting on its share of unsealed grants
	// (UnsealedPerPair), when the store counts them before the grant; a
	// store that enforces the cap in the grant's own write leaves it false.
	PairFull bool
	// Stub decodes the job's stub. It is called last, once every other
	// guard passed, so a store keeping the stub encoded pays for decoding
	// only candidates it may grant; a stub that no longer decodes is left
	// queued for an operator to see.
	Stub func() (protocol.JobStub, bool)
}

// Offerable is whether a job in state s may be offered to a device at
// all: Claimable's first guard, on its own so that a store walking every
// job it holds skips the rest (finished jobs kept for their results among
// them) before it reads anything else of each.
func Offerable(s State) bool { return s == StateQueued }

// Claimable is whether the device claiming with in may take the job now,
// and its stub if so. routes and kinds are in's routes and kinds as sets.
// The guards run cheapest first, in the reference's order.
func Claimable(c Candidate, in ClaimInput, routes map[Route]bool, kinds map[string]bool, now int64) (protocol.JobStub, bool) {
	if !Offerable(c.State) || c.Gone {
		return protocol.JobStub{}, false
	}
	// Past its deadline and not yet reached by the bounded sweep: never
	// offered, because nobody may run it.
	if c.DeadlineAt <= now {
		return protocol.JobStub{}, false
	}
	// The route as one lookup, because consent is about the pair.
	if !routes[Route{SiteID: c.SiteID, Owner: c.Owner}] {
		return protocol.JobStub{}, false
	}
	// Abandoned once, so it goes back only to the device that answered
	// for it (the sticky re-offer).
	if c.ReofferTo != "" && c.ReofferTo != in.RunnerID {
		return protocol.JobStub{}, false
	}
	// Already holding its share unsealed. Left queued rather than
	// refused: the work is legitimate, it is the rate of unsealed grants
	// that is bounded, and the next claim after a seal takes it.
	if c.PairFull {
		return protocol.JobStub{}, false
	}
	// By kind and only by kind: which service answers is the control
	// plane's, resolved from a mapping a relay must not hold.
	if !kinds[c.Kind] {
		return protocol.JobStub{}, false
	}
	// Already declined by this device: REFUSAL_NOT_REOFFERED.
	if slices.Contains(c.RefusedBy, in.RunnerID) {
		return protocol.JobStub{}, false
	}
	// Declined for something that may have changed since, but not yet.
	if c.RetryAfter > now {
		return protocol.JobStub{}, false
	}
	// Withdrawn by the site.
	if c.Cancelled {
		return protocol.JobStub{}, false
	}
	// The relay's half of AUDIENCE_BOTH_SIDES: routes include every
	// roster member a Team owner's machine may serve, which is right for
	// team work and wrong for the audience a user picks because they want
	// their own machine.
	if c.Audience == protocol.AudiencePrivate && c.Owner != in.Owner {
		return protocol.JobStub{}, false
	}
	stub, ok := c.Stub()
	// Live streams go only to devices that opted in.
	if !ok || (stub.Streaming && !in.Streams) {
		return protocol.JobStub{}, false
	}
	return stub, true
}

// SweepFacts is what the sweep's rule reads of one due job.
type SweepFacts struct {
	State         State
	DeadlineAt    int64
	AwaitingUntil int64
	// Claimed is a job with a holder; LeaseExpiresAt is the holder's lease.
	Claimed        bool
	LeaseExpiresAt int64
	SealAttempts   int
}

// SweepVerdict is what a sweep does with one job.
type SweepVerdict int

const (
	// SweepNone: nothing is due yet.
	SweepNone SweepVerdict = iota
	// SweepExpire: a finished job past its deadline expires unreported;
	// nothing was lost, and its uncollected result stays listable to a
	// collect for ResultGraceMs.
	SweepExpire
	// SweepRemove: an unfinished job past its deadline (TTL_EXPIRY), in
	// any state, is removed and reported. Dropped rather than marked
	// terminal: the site holds the authoritative record, and a tombstone
	// would keep the ciphertext with it. A daemon mid-flight learns
	// through RenewLeases, which reports the job lost.
	SweepRemove
	// SweepReofferUnsealed: the site never sealed the grant (the mark of a
	// site walking the fleet for device identities, counted as churn). The
	// job goes back to the queue for the device that held it and nobody
	// else (the sticky re-offer), one seal attempt spent.
	SweepReofferUnsealed
	// SweepEvict: the same, with its SealAttemptsBeforeEviction spent:
	// after that it is no longer patience, it is a queue handing the same
	// dead job around. Removed, and the site is told (an eviction notice).
	SweepEvict
	// SweepRequeueLapsed: a sealed job whose holder stopped renewing its
	// lease goes back to the queue.
	SweepRequeueLapsed
)

// DecideSweep is what a sweep does with a job at now. The deadline comes
// first, in every state; an unsealed grant is governed by its awaiting
// window alone, and the lease only by jobs the site has sealed.
func DecideSweep(f SweepFacts, now int64) SweepVerdict {
	switch {
	case f.DeadlineAt <= now && f.State == StateDone:
		return SweepExpire
	case f.DeadlineAt <= now:
		return SweepRemove
	case f.State == StateAwaitingPayload && f.AwaitingUntil <= now:
		if f.SealAttempts+1 >= SealAttemptsBeforeEviction {
			return SweepEvict
		}
		return SweepReofferUnsealed
	case f.Claimed && (f.State == StateReady || f.State == StateRunning) && f.LeaseExpiresAt <= now:
		return SweepRequeueLapsed
	}
	return SweepNone
}
