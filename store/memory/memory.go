// Package memory is the reference routing store: the whole state in one
// process, behind one mutex, written to be read as the specification of
// store.RoutingStore. It ports RelayState from @byollm/relay 0.1.1.
//
// Deliberately not durable. Anything a restart loses is a job that returns to
// its site's queue, which is what a lapsed lease already has to produce.
package memory

import (
	"context"
	"sync"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/store"
)

// Store is the in-memory routing store and pairing-code store.
type Store struct {
	clock           clock.Clock
	onChurn         func(store.UnsealedChurn)
	pairingCapacity int
	inlineLimit     int
	awaitingMs      int64

	mu sync.Mutex

	// jobs is keyed by (site, id): a job id is a site's to choose, so two
	// sites can choose the same one. Keyed by bare id, the second site's
	// enqueue returned the first site's job, and refusing the collision was
	// a cross-tenant existence oracle.
	jobs map[jobKey]*store.Job
	// order is every job in enqueue order; the sweep walks it.
	order []*store.Job
	// byRoute is each (site, owner) pair's jobs in enqueue order, numbered
	// by enqueued. A claim walks only its device's pairs: a job outside
	// them is never claimable (store.Claimable's route guard), and walking
	// every held job, results kept to their deadlines included, would make
	// each claim cost the site's rate times its deadlines.
	byRoute  map[store.Route][]routed
	enqueued uint64
	// byLease finds a grant by its lease id, so a holder-scoped call needs no
	// site. Added at claim, removed on requeue and forget, not on complete.
	byLease map[string]*store.Job
	// byJobID lists jobs by bare id across sites. The lease index alone gets
	// the refusals wrong: a stale lease finds nothing, and "your grant ended"
	// would become "no such job".
	byJobID map[string][]*store.Job

	// evicted are the eviction notices not yet collected, with the evicted
	// job's deadline, in eviction order.
	evicted []eviction
	// late are results the sweep forgot at their job's deadline before the
	// site collected them, kept ResultGraceMs for a collect to list
	// (store.RoutingStore.Finished), in sweep order. Nothing else reads
	// them: the job is gone.
	late []*store.Job
	// rotation is, per site, where its results rotation stands: the next
	// ResultsPage lists on from there. A site without one stands at the
	// start and may move at once.
	rotation map[string]rotationPlace

	// churn holds when each pair's unsealed grants expired: timestamps, not
	// a counter, because the threshold is "inside a window" and a counter
	// would need something to reset it. Trimmed on write.
	churn         map[store.Route][]int64
	churnReported map[store.Route]int64

	presence      map[string]*store.Presence
	presenceOrder []string

	// pairings is every stored pending pairing, in insertion order.
	pairings []store.PendingPairing
	// buckets are the pairing throttle's token buckets, made on first use.
	// Never pruned: one per source address and key that asked to pair,
	// which a process that lives for a test or a local run can afford.
	buckets map[string]store.Bucket

	// streams is the live-stream frame log (stream.go), made on first use.
	streams map[streamKey]*memStream
}

type jobKey struct{ siteID, jobID string }

// routed is a job in its pair's list, with its place in enqueue order.
type routed struct {
	seq uint64
	job *store.Job
}

func routeOf(job *store.Job) store.Route {
	return store.Route{SiteID: job.SiteID, Owner: job.Stub.Owner}
}

type eviction struct {
	key        jobKey
	deadlineAt int64
}

var (
	_ store.RoutingStore = (*Store)(nil)
	_ store.PairingCodes = (*Store)(nil)
)

// New returns an empty store.
func New(opts store.Options) *Store {
	clk := opts.Clock
	if clk == nil {
		clk = clock.System{}
	}
	capacity := opts.PairingCapacity
	if capacity == 0 {
		capacity = store.MaxOutstandingPairings
	}
	return &Store{
		clock:           clk,
		onChurn:         opts.OnChurn,
		pairingCapacity: capacity,
		inlineLimit:     opts.InlineLimit(),
		awaitingMs:      opts.AwaitingMs(),
		jobs:            map[jobKey]*store.Job{},
		byLease:         map[string]*store.Job{},
		byJobID:         map[string][]*store.Job{},
		byRoute:         map[store.Route][]routed{},
		churn:           map[store.Route][]int64{},
		churnReported:   map[store.Route]int64{},
		presence:        map[string]*store.Presence{},
	}
}

// Now is the store clock in epoch ms.
func (s *Store) Now(ctx context.Context) (int64, error) {
	return s.now(), nil
}

func (s *Store) now() int64 { return clock.EpochMs(s.clock.Now()) }
