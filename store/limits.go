package store

import "github.com/byorelay/byorelay/protocol"

// AwaitingPayloadMs is how long a site has to seal after one of its jobs is
// claimed.
//
// Distinct from the lease and from the job's deadline: the deadline asks how
// long the work is worth doing, the lease how long this device gets to run
// it, and this how long we wait for a site that has gone away. With only a
// lease, a device sits holding a job whose payload will never arrive for the
// lease's whole minute. Short, because a site that is up answers in
// milliseconds and one that is down will not answer sooner for waiting.
const AwaitingPayloadMs = 10_000

// UnsealedPerPair is how many grants one (site, job owner) pair may hold
// unsealed at once.
//
// A site must learn which device claimed its job, because it seals to that
// device's key. The leak is the ratio: a site that enqueued a thousand jobs
// and sealed none read a thousand device identities in one window. Keyed on
// the pair, not the site, because a per-site cap would throttle a real
// product to two in-flight jobs across all its users, and the pair is the
// unit consent is already expressed in. It buys time, not secrecy; churn
// reporting reads what is left.
const UnsealedPerPair = 2

// ResultGraceMs is how long past its job's deadline a store keeps a result
// for a collect to list (protocol.ResultGraceMs, where it is argued).
const ResultGraceMs = protocol.ResultGraceMs

// SealAttemptsBeforeEviction is how many consecutive unsealed expiries a job
// survives. Every device that waits on a site that never seals does
// ten seconds of nothing and cannot tell the last one already tried; the
// daemon's breaker stops one device looping, only the store can stop the
// job. Three at AwaitingPayloadMs apiece is thirty seconds, then the job is
// dropped (not marked terminal: the site holds the authoritative record).
const SealAttemptsBeforeEviction = 3

// RetryAfterMs is the not-before the relay stamps on a transient decline, so
// a device is not re-offered a job it was just declined for (a retry without
// a not-before is a spin, and in a deployment a database read per turn).
// The store only compares; the relay computes now + RetryAfterMs.
const RetryAfterMs = 30_000

// DefaultLeaseMs is the relay's default lease length.
const DefaultLeaseMs = 60_000

// Bounds on what a caller may name, in bytes of UTF-8. Every identifier a
// request carries becomes part of an item key or is stored, and DynamoDB
// refuses a partition key over 2,048 bytes (a sort key over 1,024) and an
// item over 400 KB, answering a request that reached it with an error that
// would surface as a 500. The reference, in memory, has no such limits;
// these are chosen far above anything a real peer sends (job ids and owners
// are UUIDs, runner ids runner_<uuid>, device codes 43 characters) and so
// that the longest composite key, the queue partition
// Q#<site>\0<owner>\0<kind>\0private, stays under 2,048 bytes with room to
// spare: 2 + 256 + 1 + 1,024 + 1 + a kind + 1 + 7. The relay refuses an
// identifier over its bound before any store call.
const (
	MaxRunnerIDBytes   = 256
	MaxSiteIDBytes     = 256
	MaxJobIDBytes      = 1024
	MaxOwnerBytes      = 1024
	MaxLeaseIDBytes    = 256
	MaxDeviceCodeBytes = 256
	MaxPurposeBytes    = 1024
	// MaxLeaseRefs bounds the grants one heartbeat renews or one release
	// returns: each is a store read and a write, and a list of thousands
	// of made-up ones would keep a function busy past its timeout. A
	// daemon holds as many as it runs at once, a handful.
	MaxLeaseRefs = 256
	// MaxCapabilityBytes bounds what a device's self-description costs to
	// store (its capabilities and withheld kinds as JSON), in presence and
	// in a pending pairing, well under the 400 KB item: a matrix with a few
	// hundred known models is tens of kilobytes.
	MaxCapabilityBytes = 128 << 10
)

// ResultsFreshMs is how long after a result is accepted every GET results
// page lists it (RoutingStore.ResultsPage). A poll reads the results of
// that window and a fixed share of the rest, so its cost follows the
// site's throughput, never its jobs' deadlines: a page that listed every
// result still before its deadline re-read each one on every poll until
// then, a cost per job that grew with the deadline. A site that polls at
// least this often sees each result within a poll of its acceptance; one
// that polls less often, or takes more results in the window than a page
// holds, gets the rest from the rotation (ResultsRotated).
const ResultsFreshMs = 10_000

// ResultsRecentMs and ResultsRecentMax are how a results page keeps up
// with a busy site (RoutingStore.ResultsPage): beside the newest of the
// fresh window, a page lists every result accepted in the last
// ResultsRecentMs, newest first, up to ResultsRecentMax. A site whose
// polls come at most ResultsRecentMs apart (a pump that takes a while
// under load included) then sees every result fresh while it takes no
// more than ResultsRecentMax of them between two polls (a stock site
// polling every 250 ms: 16,000 a second), where a page of a fixed size
// passed only that many a poll and left the rest to the rotation's pace,
// past their deadlines. A result is listed this way on at most
// ResultsRecentMs / poll period polls (20 at 250 ms; a site taking fewer
// than a page's fixed part in that time is listed them anyway, by the
// fresh window), so a poll's cost still follows the site's throughput and
// poll rate, never its jobs' deadlines. The relay's answer bound in bytes
// cuts a page of large results short, newest kept (internal/relay
// ResultsPageBytes).
const (
	ResultsRecentMs  = 5_000
	ResultsRecentMax = 4_000
)

// ResultsRotated is how many of a page of limit results come from the
// rotation through the site's older results: a fifth, at least one. The
// rest of the page is the fresh window's. Without the rotation a result
// the site missed in its window would never be listed again; a larger
// share would make every poll of a site holding many results cost more.
func ResultsRotated(limit int) int { return max(1, limit/5) }

// ResultsRotateMs is how often a site's results rotation may move on. A
// page lists the stretch from where the rotation stands; a page within
// ResultsRotateMs of the rotation's last move lists that same stretch and
// leaves the rotation where it is (ResultsRotationMoves). The rotation's
// place is a write (1 WCU on DynamoDB): without the bound, a site holding
// more results than a page's fresh part and the rotation's share pays a
// write on every poll, so its write cost grows with its poll rate. The
// price is the rotation's pace: it passes ResultsRotated results a
// second however fast a site polls, so a cycle through n held results
// takes at least n/ResultsRotated seconds. The fresh part is untouched:
// a site that polls at least once a ResultsFreshMs and takes no more
// than a page's fresh part between two polls sees every result fresh,
// and the rotation is only its safety net.
const ResultsRotateMs = 1_000

// ResultsRotationMoves reports whether a results page at now may move the
// site's rotation, last moved at movedAt (both store clock, ms). A move
// time ResultsRotateMs or more ahead of now does not hold the rotation:
// a replica whose clock ran ahead would otherwise stop it until this
// clock caught up, and the results outside the fresh window would go
// unlisted until then.
func ResultsRotationMoves(movedAt, now int64) bool {
	return now-movedAt >= ResultsRotateMs || movedAt-now >= ResultsRotateMs
}
