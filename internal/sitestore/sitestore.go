// Package sitestore is the site job-store contract: what a site that serves
// its users' daemons directly (the direct lane of @byollm/server 0.1.1)
// needs from a place to keep jobs, runners and
// pairings, with the semantics of the reference MemoryStore.
//
// It is the site's counterpart of package store, in the same shape:
// internal/sitestore/memory is the reference, written to be read as the spec;
// internal/sitestore/dynamo keeps the same records in DynamoDB so every Lambda is a
// replica; internal/sitestore/sitestoretest is the one behaviour suite both pass.
//
// Every decision (who may claim, what a completion does, when a job
// expires, when a dependent unblocks) is a pure function in rules.go. An
// implementation only decides how to apply one atomically: the memory store
// under a mutex, DynamoDB with a write conditioned on the version it read.
// So the two cannot drift on what a rule says, only on atomicity, and the
// suite and the race tests are about exactly that.
package sitestore

import (
	"context"
	"errors"

	"github.com/byorelay/byorelay/protocol"
)

// Job states of a site's own job records.
const (
	StateQueued   = "queued"
	StateClaimed  = "claimed"
	StateRunning  = "running"
	StateOK       = "ok"
	StateError    = "error"
	StateCanceled = "canceled"
	StateExpired  = "expired"
)

// Pairing states.
const (
	PairingPending  = "pending"
	PairingApproved = "approved"
	PairingDenied   = "denied"
)

// DefaultTTLMs is the TTL a job gets when its creator names none (15 min).
const DefaultTTLMs = 15 * 60_000

// DefaultRetentionMs is how long an ended job's record, and the sealed
// answer in it, is kept after the job ends when the deployer names no
// retention: 7 days, long enough for an app to read a result it was away
// for, short enough that a store holds a week of answers, not every answer
// ever given. It must exceed protocol.ResultGraceMs, so that a result a
// relay lists again after the job ended finds the job.
const DefaultRetentionMs = 7 * 24 * 60 * 60_000

// Job is a JobRecord. Envelope is filled by Create, Get and Refresh; what
// other methods return may leave it empty (a claim has no use for the
// ciphertext, and a store need not read it). Times are epoch ms from the store clock; 0 stands for
// the reference's null wherever the field is nullable (ClaimableAt,
// DeadlineAt, Lease), because no store clock reads 0.
type Job struct {
	ID   string
	Kind string
	// Envelope is the payload sealed to the site's own key: the store holds
	// ciphertext only.
	Envelope  protocol.SealedEnvelope
	SizeClass string
	Audience  string
	// Purpose is "" when the site named none.
	Purpose string
	Owner   string
	// AudienceAllow is nil when unset (any team member may be offered the
	// job); it is never disclosed to a runner.
	AudienceAllow []string
	DependsOn     []string
	State         string
	// Lease is nil when nobody holds the job. An adopted lease (the cloud
	// lane's) has RunnerID "".
	Lease *protocol.Lease
	// CompletedByLeaseID is the grant that recorded the result, kept after
	// the lease is dropped: it is what tells a replay from a stranger.
	CompletedByLeaseID string
	CreatedAt          int64
	// ClaimableAt is 0 while a dependency blocks the job. The TTL clock
	// starts here.
	ClaimableAt int64
	TTLMs       int64
	DeadlineAt  int64
	RefusedBy   []string
	Attempts    int64
	// Outcome is how the job ended. For a result a device signed it holds
	// the disposition alone (ok, error, canceled): the device's outcome,
	// text, error code and message included, is Answer, sealed. For an end
	// the site wrote itself (EndJob) it is the site's whole outcome, which
	// carries no device's words. A reader that wants the answer opens
	// Answer (siteserver does, when the app reads the job).
	Outcome *protocol.Outcome
	// Answer is the outcome a device reported, sealed by the site to its own
	// key as Envelope is: the store, its backups and whoever reads them hold
	// ciphertext only. nil until a device's result is recorded.
	Answer     *protocol.SealedEnvelope
	Provenance *Provenance
	UpdatedAt  int64
	// CancelRequested is the reference's separate cancel-request row: set
	// when a held job is cancelled, delivered to its holder at heartbeat,
	// dropped when the job completes.
	CancelRequested bool

	// The cloud lane's (a job published to a relay).

	// AwaitingPublish is set from Create until the relay has accepted the
	// stub: a site restarted in between publishes it again (the relay's
	// enqueue is idempotent per site and id).
	AwaitingPublish bool
	// Relayed marks a job created for a relay (AwaitingPublish at
	// Create), for the job's whole life: what the cloud lane's pump
	// counts as in flight (InFlight) once the relay has the stub.
	Relayed bool `json:",omitempty"`
	// Streaming is the stub's flag, kept so a republished stub is the
	// stub first published.
	Streaming bool
	// SealedTo is every device the payload was sealed to, each recorded
	// before the sealed payload left the site (SealTo): a result is
	// accepted from one of them, whatever lease the relay names, and from
	// nobody else, across restarts.
	SealedTo []protocol.PublicIdentity
	// StreamGrant is the lease and device the job's live stream is keyed
	// to: the latest seal, written in the same write as SealedTo and before
	// the sealed payload leaves the site. Any site process on the store
	// derives the stream key from it, during the job and after a restart;
	// kept in memory only, a stream could be read by the process that
	// sealed it and by no other. nil until the job is sealed to a device.
	StreamGrant *StreamGrant
	// EndReason says why a job ended without a result a device signed
	// (End): evicted by the relay, a result this site refused, the stub
	// refused.
	EndReason string
}

// NeedsPublish reports whether a job's stub must still be (re)published:
// set at create on the cloud lane, live, not yet accepted by the relay,
// and claimable: a job a dependency blocks (ClaimableAt 0) is published
// only once every dependency completed ok (Unblock), the direct lane's
// rule, so a relay never offers a device work whose input is missing.
func (j Job) NeedsPublish() bool {
	return j.AwaitingPublish && j.ClaimableAt != 0 && !j.Terminal() && j.State != StateExpired
}

// InFlight reports whether a cloud-lane job is published to its relay and
// has not ended: the relay may hand it to a device, so a pump must be
// there to seal it and collect its result. A job still to publish
// (NeedsPublish) is work for the pump too; a blocked one is not, until
// its dependencies complete.
func (j Job) InFlight() bool {
	return j.Relayed && !j.AwaitingPublish && j.ClaimableAt != 0 && !j.Ended()
}

// Adopted reports whether the job's lease was granted by a relay rather
// than by this site (such a lease never lapses here, only the job's
// deadline ends it).
func (j Job) Adopted() bool { return j.Lease != nil && j.Lease.RunnerID == "" }

// Terminal reports whether the job has an outcome that cannot change.
func (j Job) Terminal() bool {
	return j.State == StateOK || j.State == StateError || j.State == StateCanceled
}

// Ended reports whether the job is over for good: terminal or expired.
// A store drops the job's at-rest envelope in the write that ends it: the
// envelope is read only to hand the payload to a device, which no ended
// job may do again, and ciphertext kept past its use is only exposure.
func (j Job) Ended() bool { return j.Terminal() || j.State == StateExpired }

// Provenance is a ResultProvenance: built by the server from the job and
// the authenticated runner plus the sealed run metadata, never from what a
// daemon asserted in the clear.
type Provenance struct {
	Audience     string `json:"audience"`
	RunnerID     string `json:"runnerId"`
	RunnerOwner  string `json:"runnerOwner"`
	BackendClass string `json:"backendClass"`
	Model        string `json:"model"`
	Untrusted    bool   `json:"untrusted"`
	Stop         string `json:"stop,omitempty"`
	StopReported *bool  `json:"stopReported,omitempty"`
}

// Runner is a RunnerRecord: one approved machine, bound to one owner.
type Runner struct {
	ID            string
	Owner         string
	Label         string
	Platform      string
	DaemonVersion string
	Capabilities  []protocol.Capability
	// RevokedAt is 0 until revoked, then set once and never moved.
	RevokedAt       int64
	LastHeartbeatAt int64
	CreatedAt       int64
	// Device is the identity pinned at approval; every later request
	// signature is checked against it.
	Device protocol.PublicIdentity
}

// Pairing is a PairingRecord. The device code itself is never stored.
type Pairing struct {
	DeviceCodeHash string
	UserCode       string
	State          string
	Owner          string
	RunnerID       string
	// Collected is the deliver-once flag of an approved pairing.
	Collected     bool
	Label         string
	Platform      string
	DaemonVersion string
	Capabilities  []protocol.Capability
	Device        protocol.PublicIdentity
	ExpiresAt     int64
	CreatedAt     int64
}

// CreateInput is a job as the app hands it to the store, sealed.
type CreateInput struct {
	ID            string
	Kind          string
	Envelope      protocol.SealedEnvelope
	SizeClass     string
	Audience      string // "" means private
	Purpose       string
	Owner         string
	AudienceAllow []string
	DependsOn     []string
	TTLMs         int64 // 0 means the store's default
	DeadlineAt    int64 // 0 means none
	// AwaitingPublish marks a cloud-lane job whose stub the relay has not
	// accepted yet (Job.AwaitingPublish); Streaming is the stub's flag.
	AwaitingPublish bool
	Streaming       bool
}

// ClaimInput is a runner asking for work.
type ClaimInput struct {
	RunnerID    string
	RunnerOwner string
	// Capabilities are the ones in this claim request; stored capabilities
	// are never used (a daemon that just lost a backend must not be handed
	// work for it).
	Capabilities []protocol.Capability
	Max          int
	LeaseMs      int64
}

// RenewInput is a heartbeat's lease list.
type RenewInput struct {
	RunnerID string
	Leases   []protocol.GrantRef
	LeaseMs  int64
}

// Renewed is one extended lease.
type Renewed struct {
	JobID     string
	ExpiresAt int64
}

// RenewResult: only Lost is sent to the daemon.
type RenewResult struct {
	Renewed []Renewed
	Lost    []protocol.GrantRef
}

// AdoptInput records a lease a relay granted (cloud lane).
type AdoptInput struct {
	JobID     string
	LeaseID   string
	ExpiresAt int64
}

// StreamGrant is what a job's live stream is keyed to (docs/streaming.md).
type StreamGrant struct {
	LeaseID string
	Device  protocol.PublicIdentity
}

// Checkpoint is the text of one lease's live stream of a job up to Seq
// (its length in UTF-16 code units, the lane's offsets), sealed by the
// site to its own key as the job's at-rest envelope is: the store holds
// ciphertext only. A stream belongs to one lease (a re-run under another
// lease says something else), so a checkpoint is kept by job and lease.
type Checkpoint struct {
	Seq      int64
	Envelope protocol.SealedEnvelope
}

// SealToInput records, before the sealed payload is posted, the relay's
// lease on a job and the device the payload is sealed to.
type SealToInput struct {
	JobID     string
	LeaseID   string
	ExpiresAt int64
	Device    protocol.PublicIdentity
	// RunnerID is the runner the relay reports for the claim, which a
	// job's roster may name (AdmitsDevice).
	RunnerID string
}

// EndInput ends a live job without a device's result: Outcome's state
// (error or canceled) and why.
type EndInput struct {
	JobID   string
	Outcome protocol.Outcome
	Reason  string
}

// Holder is who may complete a job, built by one constructor per lane.
// Its fields are unexported so that a holder naming nobody cannot be
// written: the zero Holder names no lane and holds no job, and every rule
// refuses it as it refuses a stranger. Were it expressible, a holder with
// no lease, device or runner would match the empty runner id every
// relay-granted lease carries and write a result into a job it never held.
type Holder struct {
	lane     holderLane
	leaseID  string
	runnerID string
	device   protocol.PublicIdentity
}

type holderLane int

const (
	laneNone holderLane = iota
	laneLease
	laneRunner
	laneDevice
)

// HolderByLease is the direct lane's holder: the grant the daemon names and
// the runner whose signature the request carries. It holds a job only
// while this site granted that job that lease and that runner; both are
// required, and a relay's (adopted) lease is never held this way.
func HolderByLease(leaseID, runnerID string) Holder {
	return Holder{lane: laneLease, leaseID: leaseID, runnerID: runnerID}
}

// HolderByRunner is a holder for a caller with no lease id: it holds the
// job while this site's own lease on it is that runner's. The runner id is
// required, and a relay's (adopted) lease, which names no runner here, is
// never held this way.
func HolderByRunner(runnerID string) Holder {
	return Holder{lane: laneRunner, runnerID: runnerID}
}

// HolderByDevice is the cloud lane's holder: the device whose signature
// the result carries (the caller has checked it) and the lease the relay
// recorded the result under. It holds a job the site sealed to that
// device (Job.SealedTo), whatever the lease; a device with no identity
// holds nothing.
func HolderByDevice(device protocol.PublicIdentity, leaseID string) Holder {
	return Holder{lane: laneDevice, leaseID: leaseID, device: device}
}

// CompleteInput is a verified result.
type CompleteInput struct {
	JobID string
	// RunnerID is who is asking, for the duplicate answer only;
	// authorisation is Holder.
	RunnerID string
	Holder   Holder
	// Outcome is the disposition the store judges by (Job.Outcome), and
	// Answer the whole outcome sealed to the site's own key (Job.Answer).
	Outcome    protocol.Outcome
	Answer     *protocol.SealedEnvelope
	Provenance Provenance
}

// CompleteResult is Complete's answer. Job is nil only for an unknown job.
type CompleteResult struct {
	Accepted  bool
	Duplicate bool
	// PastDeadline: refused because the job's absolute deadline has passed
	// (sitestore.PastDeadline); the daemon endpoint answers it as the
	// relay answers a late result, not-found.
	PastDeadline bool
	Job          *Job
}

// ReleaseInput gives grants back.
type ReleaseInput struct {
	RunnerID string
	Leases   []protocol.GrantRef
	Reason   string
}

// TouchInput is what a heartbeat tells the runner store.
type TouchInput struct {
	RunnerID      string
	Capabilities  []protocol.Capability
	DaemonVersion string
}

// ApproveInput approves a pairing for the signed-in owner.
type ApproveInput struct {
	// UserCode is already normalised (NormalizeUserCode).
	UserCode string
	Owner    string
	RunnerID string
}

// Refusals of the pairing store, as values a caller branches on.
var (
	ErrPairingUnknown    = errors.New("sitestore: unknown pairing code")
	ErrPairingExpired    = errors.New("sitestore: pairing code has expired")
	ErrPairingNotPending = errors.New("sitestore: pairing is not pending")
	// ErrUserCodeTaken is CreatePairing's refusal of a user code a live
	// pairing already holds; the caller mints another.
	ErrUserCodeTaken = errors.New("sitestore: user code is held by a live pairing")
	// ErrTooLarge is Create's refusal of an envelope the store cannot
	// keep; nothing is stored.
	ErrTooLarge = errors.New("sitestore: the sealed payload is too large for this store")
	// ErrBadCheckpoint is PutCheckpoint's refusal of a checkpoint with no
	// job id, no lease id or a Seq below 1; nothing is stored.
	ErrBadCheckpoint = errors.New("sitestore: a checkpoint needs a job id, a lease id and a sequence of at least 1")
	// ErrContention is an operation that lost to other writers more often
	// than it retries: nothing changed, the caller may try again.
	ErrContention = errors.New("sitestore: too much contention, nothing changed; try again")
)

// JobStore is the job half of the contract. Errors are I/O failures (and
// ErrContention); refusals are values in the results. Every method reads
// the store clock itself: callers never pass an instant in, so every
// replica stamps and enforces from one source.
//
// What an implementation must guarantee beyond MemoryStore's semantics:
//  1. Claim is atomic: two concurrent callers never receive the same grant.
//  2. Unblocking is race-free: a job whose dependencies complete
//     concurrently becomes claimable exactly once and never stays blocked.
//  3. Every holder-scoped write checks the lease id, not just the runner.
//  4. Nothing matches on "": an empty runner id, lease id or device
//     identity, and the zero Holder, hold no job (rules.go decides it).
type JobStore interface {
	// Now is the store clock in epoch ms: the one clock every deadline,
	// lease and signature-freshness check reads.
	Now(ctx context.Context) (int64, error)

	// Create stores a queued job. Idempotent by id: an existing id returns
	// the stored job unchanged. Blocked (ClaimableAt 0) while some
	// dependency is not ok; an unknown dependency counts as not ok.
	Create(ctx context.Context, in CreateInput) (Job, error)
	// Get reads one job; false if absent. It does not sweep.
	Get(ctx context.Context, jobID string) (Job, bool, error)
	// Refresh is Get after whatever the clock has made due for this job
	// (ExpireJob) is written: app.job()'s "sweep, then read", without the
	// read depending on a sweep having reached the job.
	Refresh(ctx context.Context, jobID string) (Job, bool, error)
	// Claim expires what is due first, then grants up to Max jobs that pass
	// ClaimGuards, oldest ClaimableAt first, each with a fresh lease id,
	// state claimed and Attempts+1.
	Claim(ctx context.Context, in ClaimInput) ([]Job, error)
	// RenewLeases expires what is due, then extends each named lease that
	// is this runner's current grant on a claimed or running job (state
	// becomes running); every other pair comes back in Lost as named.
	RenewLeases(ctx context.Context, in RenewInput) (RenewResult, error)
	// Adopt records a relay-granted lease on a queued or claimed job whose
	// existing lease, if any, has the same id. False otherwise.
	Adopt(ctx context.Context, in AdoptInput) (Job, bool, error)
	// Complete records a result; see CompleteJob for the order of checks.
	// On ok it unblocks every dependent whose dependencies are now all ok.
	Complete(ctx context.Context, in CompleteInput) (CompleteResult, error)
	// Release requeues each named grant the runner holds under that lease
	// id and returns the released job ids; reason refused adds the runner
	// to RefusedBy.
	Release(ctx context.Context, in ReleaseInput) ([]string, error)
	// ExpireDue fires everything due (ExpireJob) and returns what changed.
	// Idempotent; complete (the scheduled sweeper's call).
	ExpireDue(ctx context.Context) ([]Job, error)
	// ExpireDueBefore is ExpireDue (ExpireJobBefore) where a job sealed
	// to a device also expires once its deadline is at or before
	// sealedBefore: the cloud pump's call, sealedBefore being the instant
	// up to which client/site judges a deadline passed (its expiryBefore,
	// read on this store's clock). ExpireDue waits the grace for them.
	ExpireDueBefore(ctx context.Context, sealedBefore int64) ([]Job, error)
	// Cancel cancels a queued job, records a cancel request on a held one,
	// leaves a terminal one alone; false if unknown.
	Cancel(ctx context.Context, jobID string) (Job, bool, error)
	// CancelRequests names, by grant, the cancel requests on jobs whose
	// current lease is this runner's.
	CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error)
	// ClaimedBy lists the jobs whose lease is this runner's.
	ClaimedBy(ctx context.Context, runnerID string) ([]Job, error)

	// The cloud lane: a job published to a relay.

	// MarkPublished clears AwaitingPublish once the relay accepted the
	// stub; false if unknown or already clear.
	MarkPublished(ctx context.Context, jobID string) (Job, bool, error)
	// Unpublished lists the jobs that NeedsPublish, oldest first.
	Unpublished(ctx context.Context) ([]Job, error)
	// SealTo expires the job if due, then applies the SealTo rule: the
	// relay's lease adopted (replacing an earlier adopted one) and the
	// device added to SealedTo, in one write. The job as it stands and
	// whether it was sealed.
	SealTo(ctx context.Context, in SealToInput) (Job, bool, error)
	// End expires the job if due, then applies EndJob. The job as it
	// stands and whether this call ended it.
	End(ctx context.Context, in EndInput) (Job, bool, error)

	// PutCheckpoint stores the durable checkpoint (docs/streaming.md) of
	// the stream leaseID ran for jobID when cp.Seq is greater than the
	// stored one's for that job and lease, or none is stored, in one
	// conditional write; false, with nothing written, otherwise. The
	// compare-and-set is what keeps a stale writer (a process that read
	// less of the stream) from rolling the checkpoint back; the lease in
	// the key is what keeps another run's text, however long, from
	// replacing it. The store does not read the job: the caller writes
	// only for a lease it holds a stream grant for. ErrBadCheckpoint for a
	// job id or lease id "" or a Seq below 1.
	PutCheckpoint(ctx context.Context, jobID, leaseID string, cp Checkpoint) (bool, error)
	// Checkpoint reads the checkpoint of jobID's stream under leaseID;
	// false if none is stored.
	Checkpoint(ctx context.Context, jobID, leaseID string) (Checkpoint, bool, error)

	// Subscribe calls onChange after every write this store makes to the
	// job (the push seam). The returned function unsubscribes and is safe
	// to call more than once.
	Subscribe(jobID string, onChange func()) (unsubscribe func())
}

// RunnerStore is the runner and pairing half.
type RunnerStore interface {
	// CreatePairing stores a pending pairing. ErrUserCodeTaken when a live
	// (unexpired) pairing holds the same user code: uniqueness is the
	// store's decision, made atomically, not a read the caller follows with
	// a write.
	CreatePairing(ctx context.Context, p Pairing) error
	PairingByDeviceCodeHash(ctx context.Context, hash string) (Pairing, bool, error)
	// PairingByUserCode finds the live pairing holding a user code.
	PairingByUserCode(ctx context.Context, userCode string) (Pairing, bool, error)
	// ApprovePairing creates the runner from the pairing (device, label,
	// platform, daemon version, capabilities: the machine the user saw) and
	// marks the pairing approved, as one operation. ErrPairingUnknown,
	// ErrPairingExpired or ErrPairingNotPending otherwise.
	ApprovePairing(ctx context.Context, in ApproveInput) (Runner, error)
	// DenyPairing marks a pairing denied; an unknown code is a no-op.
	DenyPairing(ctx context.Context, userCode string) error
	// CollectPairing sets Collected on an approved, uncollected pairing and
	// reports whether this call did: of two concurrent polls exactly one is
	// answered approved.
	CollectPairing(ctx context.Context, deviceCodeHash string) (bool, error)

	Runner(ctx context.Context, runnerID string) (Runner, bool, error)
	// TouchRunner records a heartbeat; false if the runner is unknown.
	TouchRunner(ctx context.Context, in TouchInput) (Runner, bool, error)
	// RevokeRunner is one-way: a revoked runner keeps its first RevokedAt.
	RevokeRunner(ctx context.Context, runnerID string) error
	// Runners lists every runner, or one owner's when owner is not "".
	Runners(ctx context.Context, owner string) ([]Runner, error)
}

// Store is a whole site store.
type Store interface {
	JobStore
	RunnerStore
}

// Resetter is what a test-only admin listener needs to give a conformance
// run a clean slate: every job, runner and pairing dropped. Site keys live
// outside the store and survive.
type Resetter interface {
	Reset(ctx context.Context) error
}
