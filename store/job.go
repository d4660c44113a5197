package store

import "github.com/byorelay/byorelay/protocol"

// State is where a routed job is.
//
//	queued ──claim──▶ awaiting-payload ──seal──▶ ready ──takePayload──▶ running ──complete──▶ done
//	   ▲                    │ (site never sealed: requeue,                          │
//	   │                    │  or evict on the third)                              │
//	   └────────────────────┴──── lease expired (ready/running) or release ◀───────┘
//	   (deadlineAt passed, in any state: the job is deleted)
//
// The relay cannot seal, so it cannot shortcut awaiting-payload: a payload is
// encrypted to the device that claimed it, and nobody knows which device that
// is until the claim happens.
type State string

const (
	StateQueued          State = "queued"
	StateAwaitingPayload State = "awaiting-payload"
	StateReady           State = "ready"
	StateRunning         State = "running"
	StateDone            State = "done"
)

// Disposition is a result's clear-text discriminator: the one outcome fact
// the relay is given, so it can stop dispatching a finished job. A routing
// hint, never a fact: only the site can open the envelope and check it.
type Disposition string

const (
	DispositionOK       Disposition = "ok"
	DispositionError    Disposition = "error"
	DispositionCanceled Disposition = "canceled"
)

// ReleaseReason is why a daemon gave a job back. Only ReleaseRefused means
// "not me, ever"; every other reason means "not now" and leaves the job
// claimable by the same device, or a restart would strand its own work.
type ReleaseReason string

const (
	ReleaseShutdown    ReleaseReason = "shutdown"
	ReleasePause       ReleaseReason = "pause"
	ReleaseRevoked     ReleaseReason = "revoked"
	ReleaseBackendDown ReleaseReason = "backend-down"
	ReleaseRefused     ReleaseReason = "refused"
)

// Holder is the grant a job is claimed under; the site seals to Device.
// Kept after complete, so results name the grant they were recorded under.
type Holder struct {
	RunnerID       string
	Owner          string
	Device         protocol.PublicIdentity
	LeaseID        string
	LeaseExpiresAt int64
}

// Job is a job the relay is routing: metadata and ciphertext, nothing else.
// No field can hold a private key or a plaintext, which is RELAY_BLIND as a
// data model rather than a policy.
//
// Values returned by a store are copies; changing one changes nothing stored.
// Zero values mean absent (an epoch-ms time of 0 never occurs).
type Job struct {
	ID string
	// SiteID is the control-plane site that enqueued it, the party asked to
	// seal. Jobs are keyed by (SiteID, ID): job ids are each site's to choose.
	SiteID string
	// Stub is everything the site chose to publish and not one field more.
	Stub  protocol.JobStub
	State State
	// ClaimedBy is set from the claim and cleared by a requeue.
	ClaimedBy *Holder
	// AwaitingUntil is when the site's AwaitingPayloadMs window for this
	// claim runs out; 0 when not awaiting.
	AwaitingUntil int64
	// SealAttempts counts consecutive devices that waited for this payload
	// and never got it. It survives a requeue, because a requeue is
	// exactly the event it counts, and resets on a seal, so ordinary lease
	// lapses never add up to an eviction.
	SealAttempts int
	// ReofferTo is the only runner this job may go to after a site abandoned
	// a grant on it (the sticky re-offer): repeated abandonment then
	// reveals one identity instead of a fresh sample each window. Set at the
	// first unsealed expiry, survives requeue and seal.
	ReofferTo string
	// RefusedBy are runners that released with ReleaseRefused; the job is
	// never offered to them again (REFUSAL_NOT_REOFFERED). Kept forever.
	RefusedBy []string
	// RetryAfter maps a runner to the epoch ms before which the job must not
	// be offered to it again. Other runners get it at once.
	RetryAfter map[string]int64
	// Collected is set when the site took this done job's fate (Collect):
	// it is no longer listed in Finished.
	Collected bool
	// Cancelled is a flag, not a state: a cancelled job a device is running
	// is not finished, the daemon has to be told (CancelRequests) and report.
	Cancelled bool
	// Payload is sealed to the claiming device by the site; opaque here.
	Payload *protocol.SealedEnvelope
	// Result is sealed to the site by the device; opaque here.
	Result      *protocol.SealedEnvelope
	Disposition Disposition
	// DoneAt is the epoch ms the store accepted the result (0 before); the
	// GET results page lists a result on every poll for ResultsFreshMs
	// from it.
	DoneAt int64
}
