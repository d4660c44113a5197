// Package store is the routing-store contract: what the relay needs from a
// place to keep routing state, with the exact semantics of the reference
// RoutingStore (@byollm/relay 0.1.1).
//
// store/memory is the reference implementation, written to be read as the
// spec; store/dynamo keeps the same state in DynamoDB so every Lambda is a
// replica; store/storetest is the one behaviour suite both must pass.
//
// Every method is a decision plus its write, never a read the caller follows
// with a mutation: between a read and a write another replica can act, so if
// a caller has to read, decide and write back, the operation is in the wrong
// place. And the store never learns about consent: Claim takes the routes a
// device may serve as data, so the store can hold no opinion about who may
// route, only about what it was told.
package store

import (
	"context"

	"github.com/byorelay/byorelay/protocol"
)

// RoutingStore is the contract. Every method takes a context and returns an
// error for I/O failure only; refusals are typed values in the results.
//
// What an implementation must guarantee:
//  1. Claim is atomic: two concurrent callers never receive the same job
//     (CLAIM_ATOMIC), and the per-pair unsealed cap holds across callers.
//  2. Enqueue is idempotent per (site, id).
//  3. Complete is idempotent: a replay changes nothing, decided by the same
//     operation that would have written it.
//  4. Holder-scoped operations (TakePayload, Complete, ReleaseLeases,
//     RenewLeases) check the lease id, not just the runner: a runner
//     survives a claim-release-reclaim cycle and a grant does not.
//  5. Now is the only clock. Every deadline is stamped and enforced from it.
type RoutingStore interface {
	// Now returns the store clock in epoch ms.
	Now(ctx context.Context) (int64, error)

	// Enqueue takes a stub for routing. If (SiteID, ID) is already held it
	// returns the stored job unchanged, whatever state it is in: a replayed
	// enqueue inside the signature freshness window must not yank a job back
	// from the machine running it, and a site that restarts and republishes
	// its queue must not disturb work in flight. Another site using the same
	// id is a different job; there is no collision to refuse (a refusal would
	// be a cross-tenant existence oracle). A new job starts queued with an
	// empty RefusedBy.
	Enqueue(ctx context.Context, in EnqueueInput) (Job, error)

	// Job finds one job by the site that published it; false if absent.
	// Never by bare id: a reader that finds a job by id alone can see every
	// tenant through one door. A serialising store returns a job whose stored
	// stub it cannot decode too, with its state and as much of the stub as
	// it could read, so an operator can see the row that Claim skips.
	Job(ctx context.Context, siteID, jobID string) (Job, bool, error)
	// Jobs lists every job of every site, in enqueue order (debug, tests).
	Jobs(ctx context.Context) ([]Job, error)
	// Awaiting lists the site's jobs in awaiting-payload: what it must seal.
	// A job whose AwaitingUntil or deadline has passed is left out even if
	// no sweep has moved it yet: a site must never be asked to seal for a
	// claim that has already lapsed (the reference sweeps fully first).
	Awaiting(ctx context.Context, siteID string) ([]Job, error)
	// Finished lists the site's done jobs that carry a result and that the
	// site has not collected (a store may leave their Payload out), whose
	// deadline is later than now - graceMs. A pure read: results are listed
	// on every poll until their deadline or the site collects them (a site
	// that never collects, as every reference site, sees the reference's
	// behaviour with graceMs 0, the GET's). graceMs is 0 or ResultGraceMs
	// (a collect's): a store keeps a result that long past its deadline
	// for it, though every other read treats the job as gone from its
	// deadline on. A job with the same id published again hides the old
	// result.
	Finished(ctx context.Context, siteID string, graceMs int64) ([]Job, error)
	// ResultsPage is the GET results read: results Finished with graceMs 0
	// would list, at most limit of them (limit >= 2) or, while the site
	// takes more than a page's fresh share in ResultsRecentMs, those and
	// the rotation's share, so that a poll's cost and answer size follow
	// the site's throughput and never the results it holds. It is, newest
	// first, the results accepted in the last ResultsFreshMs (Job.DoneAt),
	// up to limit - ResultsRotated(limit) of them or, if more, every one
	// accepted in the last ResultsRecentMs up to ResultsRecentMax, and up
	// to ResultsRotated(limit) more from a rotation through all the site's
	// results, in an order of the store's: each call lists on from where
	// the rotation stands and moves it past what it listed, starting over
	// past the end, unless the rotation moved within ResultsRotateMs
	// (ResultsRotationMoves), when it lists the same and leaves it. So
	// every result is listed within about n/ResultsRotated(limit) calls
	// ResultsRotateMs apart, n the results held, and a site holding no
	// more than the rotation's share beside its fresh ones sees every
	// result on every call.
	ResultsPage(ctx context.Context, siteID string, limit int) ([]Job, error)
	// Evicted lists the ids of the site's jobs that a sweep evicted (the
	// SealAttemptsBeforeEviction-th unsealed expiry) and that the site has
	// not collected, in no particular order. A notice lasts until the job's
	// deadline; it is not listed while a job with that id is held again
	// (the site published it anew, and that job is alive). A byorelay
	// addition: the reference drops an evicted job without a word, and the
	// site waits for its deadline.
	Evicted(ctx context.Context, siteID string) ([]string, error)
	// Collect is the site saying it has the fates of these jobs (a byorelay
	// addition, for a site that would otherwise be listed every finished
	// job on every poll until its deadline). A done job of the site among
	// jobIDs leaves Finished for good (Collected is set; nothing else
	// changes, so a device's replayed result is still answered
	// "duplicate"); an eviction notice among them is dropped. Any other id
	// (unknown, another site's, not done) is ignored: collecting is
	// idempotent and nothing a device can observe changes.
	Collect(ctx context.Context, siteID string, jobIDs []string) error

	// Claim grants queued work to a device, as one operation. It first sweeps
	// in-line (exactly as SweepInline does, results discarded), then counts
	// the unsealed (awaiting-payload) jobs per (site, job owner) across all
	// runners, then walks queued jobs in enqueue order until Max are granted,
	// skipping a job when, in this order:
	//  0. its Stub.DeadlineAt <= now (a job the bounded sweep has not reached
	//     yet is never granted: the deadline is enforced by the read, not by
	//     the sweep having got there);
	//  1. its (site, job owner) pair is not in Routes;
	//  2. ReofferTo is set and is not this runner (sticky re-offer; before
	//     the cap, so a job this device may not have does not spend its
	//     budget);
	//  3. its pair already holds UnsealedPerPair unsealed grants (left
	//     queued, not refused: it is the rate that is bounded);
	//  4. its kind is not in Kinds (kind is the whole match);
	//  5. this runner is in RefusedBy;
	//  6. RetryAfter[runner] > now;
	//  7. it is cancelled;
	//  8. its audience is private and its owner is not the device's Owner.
	// A stored stub that cannot be decoded (serialising stores only) is
	// skipped and left queued; the rest of the claim goes on.
	// A granted job becomes awaiting-payload with ClaimedBy = {RunnerID,
	// Owner, Device, a fresh UUID lease id, now+LeaseMs} and AwaitingUntil =
	// now+Options.AwaitingMs(), and counts against its pair for the rest of the
	// batch. It is returned as Claimed: the stub plus Lease{ID, RunnerID,
	// ExpiresAt}, Grant left nil (authoring grants is the relay's job), and
	// the AwaitingUntil stamped on the job, exactly.
	// An unsealed grant whose window ran out but which no sweep has reached
	// yet still counts against its pair: the cap errs towards handing out
	// fewer device identities to a site that does not seal, never more,
	// and the next sweep frees the slot.
	Claim(ctx context.Context, in ClaimInput) ([]Claimed, error)

	// TakePayload hands the sealed payload to the holder and marks the job
	// running, as one operation (two replicas must not both hand out the same
	// work and both believe they were first). Refusals, in order:
	// RefusedNotFound (no grant resolves, see Grant resolution below),
	// RefusedNotHolder, RefusedStaleLease, RefusedNotReady (no payload yet),
	// RefusedTerminal (state not ready or running). A repeat while running
	// hands the envelope again. Cancellation is not checked here.
	TakePayload(ctx context.Context, in HolderInput) (PayloadResult, error)

	// Complete records a result. Refusals, in order: RefusedNotFound,
	// RefusedNotHolder; then, if the job is done, the grant that finished it
	// gets {Accepted: false, Duplicate: true, State: done} and any other
	// grant RefusedStaleLease (terminal before lease, after holder, so a
	// replayed result is answered "already recorded" and a job id is not a
	// terminality probe for anyone else); then RefusedStaleLease for a lease
	// that is not current. Otherwise Result and Disposition are stored, the
	// state becomes done, ClaimedBy is kept, and the answer is {Accepted:
	// true, State: done}. Accepted from awaiting-payload, ready or running.
	// A replay never overwrites.
	Complete(ctx context.Context, in CompleteInput) (CompleteResult, error)

	// ReleaseLeases gives back the grants a runner names and returns the job
	// ids it released. A grant is skipped (silently) when it does not
	// resolve, is held by another runner or under another lease, or the job
	// is done: a release must never un-finish a job, or the recorded result
	// becomes unreachable and the job runs twice. For the rest: Reason
	// ReleaseRefused adds the runner to RefusedBy (once, kept forever);
	// RetryAfter != 0 sets RetryAfter[runner]; both before the requeue, so
	// the job goes back already knowing. Then the job is requeued.
	ReleaseLeases(ctx context.Context, in ReleaseInput) ([]string, error)

	// Seal takes a site's sealed payload. RefusedNotFound when (SiteID,
	// JobID) is absent; RefusedTooLate with Was = the state when the job is
	// not awaiting-payload (a late seal must not land on a claim that has
	// moved). Otherwise Payload is stored, the state becomes ready,
	// AwaitingUntil and SealAttempts are cleared (it counts consecutive
	// failures, not a lifetime quota) and ReofferTo is kept. AwaitingUntil
	// is not re-checked here; only a sweep enforces it.
	Seal(ctx context.Context, in SealInput) (SealResult, error)

	// Cancel marks a site's job cancelled; false when (siteID, jobID) is not
	// that site's. The job is neither deleted nor requeued: its holder has to
	// hear about it through CancelRequests.
	Cancel(ctx context.Context, siteID, jobID string) (bool, error)
	// CancelRequests names, by grant, every cancelled job the runner holds,
	// done ones included (they keep ClaimedBy).
	CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error)

	// RenewLeases extends the leases the runner still holds and names the
	// ones it does not, from one read of one state (asked separately, under
	// two replicas the two answers could differ). now is read once; a lease
	// that resolves, is current and is this runner's gets LeaseExpiresAt =
	// now+LeaseMs and is reported in Renewed; any other comes back in Lost
	// exactly as named. State is not checked, and AwaitingUntil is never
	// extended: a busy device has no bearing on how long we wait for a site.
	// A grant a sweep would end is lost even before any sweep reaches it:
	// the job's deadline passed, it is awaiting-payload with AwaitingUntil
	// <= now, or it is ready or running with LeaseExpiresAt <= now. The
	// reference relay sweeps fully before every renewal, so it never renews
	// such a grant; a bounded sweep must not turn a lapsed lease back into a
	// live one just because it had not got that far.
	RenewLeases(ctx context.Context, in RenewInput) (RenewResult, error)

	// Seen records a device as present, stamping LastSeenAt from the store
	// clock. An existing record keeps its Owner and Device and has
	// Capabilities and Withheld replaced, never merged (a union would go on
	// advertising a backend the machine lost); an empty list is stored as
	// empty. Returns the record as stored.
	Seen(ctx context.Context, s Sighting) (Presence, error)
	// Presence finds a runner's record; false if never seen (or lost).
	Presence(ctx context.Context, runnerID string) (Presence, bool, error)
	// Everyone lists every presence record.
	Everyone(ctx context.Context) ([]Presence, error)

	// Sweep fires whatever the clock says is due and reports it. For each
	// job:
	//  1. Stub.DeadlineAt <= now, in any state: the job is deleted with its
	//     payload and result ciphertext, and reported Removed, unless it is
	//     done: a finished job is gone from its deadline on (no read
	//     returns it) but not reported, since nothing was lost, and a store
	//     may let it expire (DynamoDB's TTL) rather than delete it.
	//  2. awaiting-payload with AwaitingUntil <= now (the site never sealed):
	//     churn is noted for (site, job owner); ReofferTo is set to the
	//     holder if unset; SealAttempts+1 reaching SealAttemptsBeforeEviction
	//     deletes the job (Removed) and leaves an eviction notice for the
	//     site (Evicted), otherwise it is stored and the job requeued
	//     (Requeued).
	//  3. ready or running with LeaseExpiresAt <= now: requeued (no
	//     ReofferTo, no attempt counted).
	// Requeuing clears ClaimedBy, AwaitingUntil and Payload and keeps
	// RefusedBy, RetryAfter, ReofferTo, SealAttempts and Cancelled. Jobs are
	// reported as they were left (requeued ones queued, removed ones as they
	// were when deleted). Safe to run from any replica, concurrently.
	//
	// Sweep is complete: it fires everything due, however much that is. It
	// is the scheduled sweeper's call, off every request path.
	Sweep(ctx context.Context) (SweepResult, error)

	// SweepInline is Sweep bounded for a request path: it fires at most
	// Options.InlineSweepLimit due jobs, earliest due first (a job is due at
	// the first of its deadline, its awaiting window if awaiting-payload,
	// its lease expiry if ready or running), each exactly as Sweep would.
	// Claim runs it first; a relay that sweeps before a heartbeat or a
	// pending read calls it rather than Sweep. A store may read only part
	// of its due items a call (the DynamoDB store reads one shard of its
	// due index, a different one each call) and then picks the earliest of
	// that part; such a store implements LapseSweeper, and its Claim
	// sweeps the lapsed grants and expired jobs it reads itself, so that
	// no answer depends on which part a call read.
	//
	// Bounded because after an outage the backlog is arbitrary, and an
	// unbounded in-line sweep puts all of it inside one device's claim: its
	// latency and cost become the size of the backlog, and a Lambda request
	// timeout turns into a claim that never succeeds. Nothing depends on it
	// having reached an item: Claim, RenewLeases and Awaiting judge a passed
	// deadline, window or lease for themselves; what it buys is liveness,
	// work returning to the queue without waiting for the schedule. Under
	// ordinary load everything due fits in the bound and the behaviour is
	// the reference's. A store with other due bookkeeping (the DynamoDB
	// store's unsealed-set repairs) spends the same budget on it, so it may
	// move fewer jobs than the bound, never more.
	SweepInline(ctx context.Context) (SweepResult, error)
}

// DefaultInlineSweepLimit is how many due items an in-line sweep handles
// when Options.InlineSweepLimit is 0. Small, because it is paid inside a
// device's request; larger than anything ordinary traffic makes due between
// two claims, so an in-line sweep normally still fires everything.
const DefaultInlineSweepLimit = 25

// Options configure a store implementation.
type Options struct {
	// Clock stamps and enforces every deadline. Nil means the host clock.
	Clock Clock
	// OnChurn is told when a (site, job owner) pair lets ChurnExpiries
	// unsealed grants expire inside ChurnWindowMs; at most once per pair per
	// ChurnQuietMs. Called synchronously by the sweep (Sweep, SweepInline or
	// Claim's) that crossed the threshold, after its writes and outside any lock (it may
	// call back into the store); a panic in it is recovered, because a
	// report is evidence about the sweep, not part of it. Nil disables churn
	// tracking entirely (nothing is recorded).
	OnChurn func(UnsealedChurn)
	// PairingCapacity is the pairing ceiling; 0 means MaxOutstandingPairings.
	PairingCapacity int
	// InlineSweepLimit bounds SweepInline (and so the sweep Claim runs
	// first); 0 means DefaultInlineSweepLimit. Sweep is never bounded.
	InlineSweepLimit int
	// AwaitingPayloadMs is how long a site has to seal after a claim; 0
	// means AwaitingPayloadMs (the reference's 10 s). A test that wants
	// the awaiting window to lapse often (the chaos run) shortens it; a
	// deployment has no reason to.
	AwaitingPayloadMs int64
}

// AwaitingMs is o.AwaitingPayloadMs with the default applied.
func (o Options) AwaitingMs() int64 {
	if o.AwaitingPayloadMs <= 0 {
		return AwaitingPayloadMs
	}
	return o.AwaitingPayloadMs
}

// InlineLimit is o.InlineSweepLimit with the default applied.
func (o Options) InlineLimit() int {
	if o.InlineSweepLimit <= 0 {
		return DefaultInlineSweepLimit
	}
	return o.InlineSweepLimit
}

// EnqueueInput is a stub a site publishes under its own control-plane id.
type EnqueueInput struct {
	ID     string
	SiteID string
	Stub   protocol.JobStub
}

// ClaimInput is a device asking for work.
type ClaimInput struct {
	RunnerID string
	// Owner is the device's owner (not the job's).
	Owner  string
	Device protocol.PublicIdentity
	// Routes are the (site, job owner) pairs this device may run work for,
	// collapsed from the projection by the caller. Order and duplicates do
	// not matter.
	Routes []Route
	// Kinds are the job kinds this device can run. Order and duplicates do
	// not matter.
	Kinds []string
	// Max is the most jobs to grant in this call.
	Max int
	// LeaseMs is the lease length from the store's now.
	LeaseMs int64
	// Streams: the device opted in to live streams (docs/streaming.md).
	// A stub with streaming set goes only to such a device, checked last:
	// a device that does not stream must never run a job whose site is
	// waiting on its tokens.
	Streams bool
}

// Claimed is one job a claim granted: the stub and lease the device is
// answered with, and the end of the awaiting-payload window the store
// stamped on the job (Job.AwaitingUntil, store clock). The window is the
// store's alone (Options.AwaitingPayloadMs): a caller that needs to know
// when it closes (the relay, to wake a sweep for that moment) reads it
// here, because one recomputed from the lease and a window configured
// twice would disagree with the sweep the moment the two values differ.
type Claimed struct {
	protocol.ClaimedStub
	AwaitingUntil int64
}

// HolderInput names one grant held by a runner. Holder-scoped calls carry no
// site: the lease id is unique across sites and names the job.
//
// Grant resolution, shared by every holder-scoped method: the job whose
// current lease is LeaseID, if its id is JobID (a lease for another job never
// unlocks this one); else a job with id JobID, on any site, whose ClaimedBy
// is this runner (which yields stale-lease); else nothing (not-found). So a
// runner learns about jobs it holds or held and nothing else: another
// tenant's job id answers exactly like an id nobody used.
type HolderInput struct {
	JobID    string
	RunnerID string
	LeaseID  string
}

// PayloadResult is TakePayload's answer: exactly one of Envelope or Refused.
type PayloadResult struct {
	Envelope *protocol.SealedEnvelope
	Refused  Refusal
}

// CompleteInput is a device reporting a result under a grant.
type CompleteInput struct {
	JobID       string
	RunnerID    string
	LeaseID     string
	Envelope    protocol.SealedEnvelope
	Disposition Disposition
}

// CompleteResult is Complete's answer. When Refused is set nothing else is.
type CompleteResult struct {
	Accepted  bool
	Duplicate bool
	State     State
	Refused   Refusal
}

// ReleaseInput is a runner giving grants back.
type ReleaseInput struct {
	RunnerID string
	Leases   []protocol.GrantRef
	// Reason is optional (""); only ReleaseRefused is remembered.
	Reason ReleaseReason
	// RetryAfter is an optional (0) epoch ms before which these jobs must not
	// be offered to this runner again; every other runner may have them at
	// once.
	RetryAfter int64
}

// SealInput is a site's sealed payload for one of its claimed jobs.
type SealInput struct {
	SiteID   string
	JobID    string
	Envelope protocol.SealedEnvelope
}

// SealResult is Seal's answer: State on success, or Refused (with Was for
// RefusedTooLate).
type SealResult struct {
	State   State
	Refused Refusal
	Was     State
}

// RenewInput is a heartbeat's active leases.
type RenewInput struct {
	RunnerID string
	Leases   []protocol.GrantRef
	LeaseMs  int64
}

// RenewedLease is one lease extended by RenewLeases.
type RenewedLease struct {
	JobID     string
	ExpiresAt int64
}

// RenewResult is RenewLeases' answer; both lists are in request order.
type RenewResult struct {
	Renewed []RenewedLease
	Lost    []protocol.GrantRef
}

// SweepResult is what a sweep did. Both halves matter: a caller that logs
// requeues and never mentions removals reports a shrinking queue with no
// reason for it. The reference reports Requeued then Removed as one
// list.
type SweepResult struct {
	Requeued []Job
	Removed  []Job
}

// SweepStats is what a scheduled sweep did, in counts only: a store that
// sweeps a large backlog reports its jobs page by page (PagedSweeper)
// rather than holding them all.
type SweepStats struct {
	Requeued, Removed int
	// Failed counts the due items whose handling failed; the sweep went on
	// past each, and each is still due, so the next sweep retries it.
	Failed int
	// BacklogMs is the age of the oldest due entry when the sweep started
	// (0: nothing was due): how far behind the sweepers are.
	BacklogMs int64
}

// PagedSweeper is a store whose scheduled sweep runs in bounded memory:
// page is called with what each page of due entries moved, possibly from
// several goroutines at once, and the answer holds only counts. A sweep
// that keeps every moved job for its answer holds the whole backlog.
type PagedSweeper interface {
	SweepPages(ctx context.Context, page func(SweepResult)) (SweepStats, error)
}

// LapseSweeper is a store whose in-line sweep reads only part of its due
// items a request (the DynamoDB store reads one shard of its due index),
// so a request also asks it to end the lapsed grants the request itself
// is about: SweepLapsed handles, each exactly as Sweep would, the grants
// among Grants whose lease, awaiting window or deadline is over, and
// SiteID's unsealed grants whose awaiting window is over; at most
// Options.InlineSweepLimit jobs. A heartbeat passes the leases it was
// told are lost, a pending read its site, so the job is back in the queue
// when the answer says the grant is over, as it is after a sweep that
// reads everything. A store whose SweepInline reads every due item (the
// memory store) need not implement it.
type LapseSweeper interface {
	SweepLapsed(ctx context.Context, in LapsedInput) (SweepResult, error)
}

// AwaitingSweeper is a LapseSweeper whose pending read needs one read of
// the site's unsealed grants, not two: SweepAwaiting is
// SweepLapsed(LapsedInput{SiteID: siteID}) then Awaiting(siteID), the
// lapsed grants ended and the live ones listed from the same read. A
// store whose grants cost a call per shard to read (store/dynamo) would
// otherwise pay every pending poll twice.
type AwaitingSweeper interface {
	SweepAwaiting(ctx context.Context, siteID string) ([]Job, SweepResult, error)
}

// LapsedInput names what SweepLapsed may end.
type LapsedInput struct {
	Grants []protocol.GrantRef
	SiteID string
}

// All is the reference's single list: requeued first, then removed. The
// relay's sweep answer ({requeued: ids}) is built from it.
func (r SweepResult) All() []Job {
	return append(append([]Job{}, r.Requeued...), r.Removed...)
}

// QueuedLister lists one person's queued jobs at one site, oldest first:
// the operator's view of work that waits, never a request path. A store
// reads only that person's queue partitions, so the cost follows limit,
// not the size of the queue. Jobs sent back to the one device that
// abandoned them (the sticky queue) are not listed.
type QueuedLister interface {
	QueuedFor(ctx context.Context, siteID, owner string, limit int) ([]Job, error)
}
