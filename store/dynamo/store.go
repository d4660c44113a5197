package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/store"
)

// Defaults for Config's zero values.
const (
	// DefaultInlineEnvelopeBytes is the largest envelope kept inside its job
	// item. Above it the envelope goes to S3: an item is capped at 400 KB,
	// and every later write to the job (a lease renewal on each heartbeat)
	// is billed on the whole item, so a large inline envelope is paid for
	// again and again. Two envelopes at this size keep an item under 70 KB.
	DefaultInlineEnvelopeBytes = 32 * 1024
	// DefaultDueShards is how many partitions the due index's request
	// shards (and, as many again, its end shards) are spread over: a
	// partition takes 1,000 WCU/s and 3,000 RCU/s. A job writes about 3
	// WCU of index entries on the request shards (the bench's key heat:
	// docs/performance.md), so 10,000 jobs/s is 30,000 WCU/s, 117 per
	// shard at 256 (12% of the limit; 23% at 128, 94% at 32). Every claim, heartbeat and pending read queries one shard
	// (0.5 RCU), about 0.2 Queries per idle daemon-second at the default
	// heartbeat, so 1,000,000 idle daemons read 100,000 RCU/s, 391 per
	// shard at 256 (13%). More shards cost only the scheduled sweep, one
	// more empty Query a shard a run.
	DefaultDueShards = 256
	// MaxDueShards bounds Config.DueShards: the scheduled sweep queries
	// every shard each run.
	MaxDueShards = 1024
	// DefaultUnsealedShards is how many partitions each site's unsealed
	// sets are spread over (unsealedPK), sized so that one site running
	// 10,000 jobs/s keeps each under half a partition. Each of a site's
	// jobs writes its pair's set twice (a claim's ADD, a seal's DELETE, 1
	// WCU each: the one-site heat of docs/performance.md), so the count
	// must be at least 10,000 x 2 / 500 = 40: 64 puts about 313 WCU/s on
	// each (31%), given owners enough to hash over them. A pair's set is
	// one item, so one (site, owner) pair stays on one partition whatever
	// the count; its rate is bounded by UnsealedPerPair. Every pending read
	// queries every shard (one strongly consistent Query each, at least 1
	// RCU, its in-line sweep's too: SweepAwaiting), so the count is also
	// that read's number of calls and its floor of RCU, whatever the
	// site's size (docs/cost.md, "A site's shards").
	DefaultUnsealedShards = 64
	// DefaultFinishedShards is how many partitions each site's finished
	// list is spread over (finishedKey), sized as the unsealed sets: a job
	// writes its site's list twice (its entry put by the result, deleted
	// at its end or collect, 1 WCU each), so the count must be at least
	// 10,000 x 2 / 500 = 40: 64 puts 313 WCU/s on each (31%). A results
	// GET reads the fresh of every shard (one keys-only Query each) and a
	// collect every shard's whole list, so the count is also their
	// number of Queries.
	DefaultFinishedShards = 64
	// MaxSiteShards bounds Config.UnsealedShards and FinishedShards: each
	// is the number of Queries a site read makes.
	MaxSiteShards = 256
)

// ErrContention is returned when an operation lost its conditional write
// more times than it is willing to retry. Nothing was changed by the call;
// the caller may retry it.
// It is the contract's store.ErrContention, so the relay needs no import of
// this package to tell it apart from a failure.
var ErrContention = store.ErrContention

// ErrNoBucket is returned when an envelope is too large to inline and no
// bucket is configured (Config.Objects).
var ErrNoBucket = errors.New("dynamo: envelope too large to inline and no S3 bucket configured")

// API is the subset of the DynamoDB client the store calls; a
// *dynamodb.Client satisfies it. It is the platform's interface, named here
// so that code outside this module can name what Config.DB takes (a wrapper
// that injects faults, say).
type API = ddb.API

// Meter counts the capacity of every call a store makes (Config.Meter). It
// is the platform's, named here for importers.
type Meter = ddb.Meter

// Config is what New needs.
type Config struct {
	// DB is a DynamoDB client (or a wrapper around one).
	DB API
	// Table is the routing table, created from template.yaml.
	Table string
	// Objects holds envelopes larger than InlineEnvelopeBytes, in an S3
	// bucket. Optional when every envelope is small.
	Objects Objects
	// OnObjectDeleteFailed is told of each envelope object whose delete
	// failed, once per object and attempt, with the error. No caller sees
	// the failure otherwise: the end sweep retries the delete, so one is a
	// blip, but deletes that keep failing (a missing s3:DeleteObject
	// grant, a bucket policy) leave ciphertext in the bucket past its job,
	// and only this says so. Called synchronously; nil ignores them.
	OnObjectDeleteFailed func(error)
	// Options are the contract's: clock, churn report, pairing capacity.
	Options store.Options
	// InlineEnvelopeBytes overrides DefaultInlineEnvelopeBytes.
	InlineEnvelopeBytes int
	// DueShards overrides DefaultDueShards (1 to MaxDueShards). It is a
	// table setting: every replica and function over one table must use
	// the same value (template.yaml's DueShards parameter, passed to every
	// function as DUE_SHARDS), or a shard above a replica's count is read
	// by nobody but the replicas that count it. Raising it on a live table
	// is safe: an entry is keyed D#k with k below the count it was written
	// under, so every old entry is on one of the larger count's shards,
	// and the scheduled sweep reads them all. Lowering it strands the
	// entries on the shards above the new count: no sweep reads them
	// again, so their jobs are swept only when a request touches them or
	// their next write moves their entry, and their end hooks wait for
	// TTL. A smaller count is for a new table only.
	DueShards int
	// UnsealedShards and FinishedShards override DefaultUnsealedShards
	// and DefaultFinishedShards (1 to MaxSiteShards). Table settings, as
	// DueShards (UNSEALED_SHARDS and FINISHED_SHARDS, template.yaml's
	// UnsealedShards and FinishedShards), with the same rule: raising one
	// on a live table is safe, lowering one is for a new table only. A
	// set or a finished entry written under a smaller count is on a shard
	// below it, and every reader reads every shard below its own count,
	// so a raise loses none: a finished entry stays where it was written
	// until its job ends, and a pair whose set moves to another shard
	// keeps its earlier grants in the old set, which Awaiting still reads
	// and the set's own check (repairSlots) empties once their windows
	// are over; until then the pair may hold up to twice
	// store.UnsealedPerPair unsealed grants. Lowering strands the sets and
	// entries above the new count, which no reader reads again. A table
	// from before the sets and lists were sharded holds count 1's keys.
	UnsealedShards int
	FinishedShards int
	// Meter, when set, asks DynamoDB for the capacity every call consumes
	// and adds it up.
	Meter *Meter
}

// Store is the DynamoDB routing store and pairing-code store. It keeps no
// state between calls that another replica could disagree with: every
// instance over one table is a replica.
type Store struct {
	db      ddb.API
	table   string
	objects Objects
	clock   clock.Clock
	// server is clock when that is a ddb.ServerClock: the sweep asks it whether
	// expiries may be decided.
	server  *ddb.ServerClock
	onChurn func(store.UnsealedChurn)
	// onDeleteFailed is Config.OnObjectDeleteFailed.
	onDeleteFailed func(error)

	pairingCapacity int
	inlineLimit     int
	awaitingMs      int64
	inlineBytes     int
	shards          int
	// unsealedShards and finishedShards are Config's, defaulted.
	unsealedShards int
	finishedShards int

	// tagOf and siteOf cache lease tags both ways (lease.go). A tag never
	// changes once written, so no replica can disagree with a cached one.
	tagOf, siteOf sync.Map

	// seq breaks ties in enqueue order between jobs this instance enqueues
	// in the same millisecond (a test clock that does not move).
	seq atomic.Uint64

	// inlineShard picks the request shard the next in-line sweep reads
	// (sweep.go): round robin from a random start, so every shard is read
	// by some request of every replica, and replicas started together do
	// not read the same shards in step.
	inlineShard atomic.Uint64
}

var (
	_ store.RoutingStore = (*Store)(nil)
	_ store.PagedSweeper = (*Store)(nil)
	_ store.PairingCodes = (*Store)(nil)
)

// New returns a store over an existing table.
func New(cfg Config) (*Store, error) {
	if cfg.DB == nil || cfg.Table == "" {
		return nil, errors.New("dynamo: Config needs DB and Table")
	}
	if cfg.DueShards < 0 || cfg.DueShards > MaxDueShards {
		return nil, fmt.Errorf("dynamo: DueShards must be 0 (the default) to %d", MaxDueShards)
	}
	if cfg.UnsealedShards < 0 || cfg.UnsealedShards > MaxSiteShards || cfg.FinishedShards < 0 || cfg.FinishedShards > MaxSiteShards {
		return nil, fmt.Errorf("dynamo: UnsealedShards and FinishedShards must be 0 (the default) to %d", MaxSiteShards)
	}
	s := &Store{
		db:              cfg.DB,
		table:           cfg.Table,
		objects:         cfg.Objects,
		clock:           cfg.Options.Clock,
		onChurn:         cfg.Options.OnChurn,
		onDeleteFailed:  cfg.OnObjectDeleteFailed,
		pairingCapacity: cfg.Options.PairingCapacity,
		inlineLimit:     cfg.Options.InlineLimit(),
		awaitingMs:      cfg.Options.AwaitingMs(),
		inlineBytes:     cfg.InlineEnvelopeBytes,
		shards:          cfg.DueShards,
		unsealedShards:  cmp.Or(cfg.UnsealedShards, DefaultUnsealedShards),
		finishedShards:  cmp.Or(cfg.FinishedShards, DefaultFinishedShards),
	}
	if s.clock == nil {
		s.clock = clock.System{}
	}
	if s.pairingCapacity == 0 {
		s.pairingCapacity = store.MaxOutstandingPairings
	}
	if s.inlineBytes == 0 {
		s.inlineBytes = DefaultInlineEnvelopeBytes
	}
	if s.shards == 0 {
		s.shards = DefaultDueShards
	}
	s.inlineShard.Store(rand.Uint64N(uint64(s.shards)))
	if sc, ok := s.clock.(*ddb.ServerClock); ok {
		// Every response the store sees calibrates its clock, so the clock
		// and the client cannot be wired apart.
		s.server = sc
		s.db = sc.Wrap(s.db)
	}
	if cfg.Meter != nil {
		s.db = cfg.Meter.Wrap(s.db)
	}
	return s, nil
}

// Now is the store clock in epoch ms.
func (s *Store) Now(ctx context.Context) (int64, error) { return s.now(), nil }

func (s *Store) now() int64 { return clock.EpochMs(s.clock.Now()) }

// nextSeq is an enqueue-order key: the store clock, then this instance's
// counter. Two replicas enqueueing in one millisecond interleave arbitrarily,
// which is all "enqueue order" can mean for concurrent enqueues.
func (s *Store) nextSeq(now int64) string {
	return fmt.Sprintf("%013d.%016d", now, s.seq.Add(1))
}

// maxInFlight bounds the requests one call makes at once, so a device
// with a large route set does not open a connection per route.
const maxInFlight = 16

// each runs f(0) … f(n-1) concurrently (at most maxInFlight at a time) and
// returns their errors joined.
func each(n int, f func(i int) error) error {
	errs := make([]error, n)
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
