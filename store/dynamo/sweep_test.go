package dynamo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// dueQueries counts the Queries of the due index, by shard key, and can
// fail the GetItem of chosen job partitions.
type dueQueries struct {
	ddb.API
	mu     sync.Mutex
	shards map[string]int
	fail   map[string]bool
}

func (d *dueQueries) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName != nil && *in.IndexName == "due" {
		dk := in.ExpressionAttributeValues[":dk"].(*types.AttributeValueMemberS).Value
		d.mu.Lock()
		d.shards[dk]++
		d.mu.Unlock()
	}
	return d.API.Query(ctx, in, opts...)
}

func (d *dueQueries) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk := in.Key["pk"].(*types.AttributeValueMemberS).Value
	d.mu.Lock()
	failing := d.fail[pk]
	d.mu.Unlock()
	if failing {
		return nil, errors.New("injected read failure")
	}
	return d.API.GetItem(ctx, in, opts...)
}

func (d *dueQueries) take() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.shards
	d.shards = map[string]int{}
	return got
}

// An in-line sweep reads one request shard of the due index with one
// Query, never an end shard, and N successive sweeps read N different
// shards, so every shard is read by some request; the scheduled sweep
// reads them all.
func TestSweepInlineReadsOneShard(t *testing.T) {
	ctx := context.Background()
	const shards = 8
	db := &dueQueries{API: localtest.DynamoClient(t), shards: map[string]int{}}
	s, err := New(Config{DB: db, Table: newTable(t), DueShards: shards,
		Options: store.Options{Clock: clock.NewManual(storetest.Start)}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range shards {
		if _, err := s.SweepInline(ctx); err != nil {
			t.Fatal(err)
		}
		got := db.take()
		if len(got) != 1 {
			t.Fatalf("one in-line sweep queried shards %v, want exactly one", got)
		}
		for dk, n := range got {
			if n != 1 || dk[:2] != "D#" {
				t.Fatalf("in-line sweep queried %s %d times, want one D# shard once", dk, n)
			}
			seen[dk] = true
		}
	}
	if len(seen) != shards {
		t.Fatalf("%d in-line sweeps read shards %v, want %d different ones", shards, seen, shards)
	}
	// A claim's in-line sweep is the same one Query.
	if _, err := s.Claim(ctx, store.ClaimInput{RunnerID: "r", Owner: "alice", Max: 1, LeaseMs: 60_000,
		Routes: []store.Route{{SiteID: "site", Owner: "alice"}}, Kinds: []string{"llm.generate"}}); err != nil {
		t.Fatal(err)
	}
	if got := db.take(); len(got) != 1 {
		t.Fatalf("a claim queried due shards %v, want exactly one", got)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := db.take(); len(got) != 2*shards {
		t.Fatalf("scheduled sweep queried %d shards (%v), want %d", len(got), got, 2*shards)
	}
}

// loadDue writes n queued jobs already past their deadline, straight to
// the table with BatchWriteItem (the items Enqueue writes, without a
// conditional put each): n due entries for the sweep to remove.
func loadDue(t testing.TB, db *dynamodb.Client, s *Store, n int, deadline int64) {
	t.Helper()
	writeQueued(t, db, s, n, func(i int) (string, int64, int64) {
		return fmt.Sprintf("due-%07d", i), deadline - int64(i%1000), deadline
	})
}

// The scheduled sweep goes on past an item it cannot handle: it counts
// it, clears every other due entry, answers an error naming it, and the
// next sweep (the fault gone) clears it too. It reports how old the
// oldest due entry was.
func TestSweepSkipsFailedItem(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	db := &dueQueries{API: localtest.DynamoClient(t), shards: map[string]int{}, fail: map[string]bool{}}
	s, err := New(Config{DB: db, Table: newTable(t), Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	loadDue(t, localtest.DynamoClient(t), s, n, storetest.Start.UnixMilli()-5_000)
	bad := jobPK("site", "due-0000007")
	db.fail[bad] = true
	var pages atomic.Int64
	stats, err := s.SweepPages(ctx, func(r store.SweepResult) { pages.Add(int64(len(r.Removed))) })
	if err == nil {
		t.Fatal("a sweep with a failed item answered no error")
	}
	if stats.Failed != 1 || stats.Removed != n-1 || pages.Load() != n-1 {
		t.Fatalf("stats %+v, pages reported %d removed; want 1 failed, %d removed", stats, pages.Load(), n-1)
	}
	// The deadlines spread over the 1,000 ms before Start-5000; the oldest
	// of the n loaded is (n-1)%1000 ms before that.
	if stats.BacklogMs != 5_000+(n-1)%1000 {
		t.Fatalf("backlog %d ms, want %d", stats.BacklogMs, 5_000+(n-1)%1000)
	}
	db.fail[bad] = false
	stats, err = s.SweepPages(ctx, nil)
	if err != nil || stats.Removed != 1 || stats.Failed != 0 {
		t.Fatalf("second sweep: %+v %v, want the one left removed", stats, err)
	}
	if stats, err = s.SweepPages(ctx, nil); err != nil || stats.Removed != 0 || stats.BacklogMs != 0 {
		t.Fatalf("third sweep: %+v %v, want nothing due", stats, err)
	}
}

// TestSweepLoad loads a backlog of due entries on DynamoDB Local and has
// the scheduled sweep clear it, page by page: it logs the items a second
// per worker and asserts the heap the sweep holds stays under a bound that
// does not depend on the backlog. SWEEP_LOAD sets the backlog (make
// sweep-load: 100,000); the default is a smoke of 5,000.
func TestSweepLoad(t *testing.T) {
	n := 5_000
	if v := os.Getenv("SWEEP_LOAD"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	loadDue(t, localtest.DynamoClient(t), s, n, storetest.Start.UnixMilli()-1_000)

	// Sample the live heap while the sweep runs.
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	started := time.Now()
	var reported atomic.Int64
	stats, err := s.SweepPages(ctx, func(r store.SweepResult) { reported.Add(int64(len(r.Removed))) })
	took := time.Since(started)
	close(done)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if stats.Removed != n || reported.Load() != int64(n) {
		t.Fatalf("removed %d (pages reported %d), want %d", stats.Removed, reported.Load(), n)
	}
	if left, err := s.SweepPages(ctx, nil); err != nil || left.Removed != 0 || left.BacklogMs != 0 {
		t.Fatalf("a second sweep found %+v %v, want nothing due", left, err)
	}
	workers := min(2*s.shards, maxInFlight)
	perWorker := float64(n) / took.Seconds() / float64(workers)
	grown := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("swept %d due entries in %v with %d workers: %.0f items/s per worker; heap grew at most %.1f MB",
		n, took.Round(time.Millisecond), workers, perWorker, float64(grown)/(1<<20))
	// A page of sweepPage entries per worker, the jobs it handles and the
	// SDK's buffers: a few MB whatever the backlog. Loaded whole, 100,000
	// entries hold well over 100 MB.
	const boundMB = 32
	if grown > boundMB<<20 {
		t.Fatalf("heap grew %.1f MB during the sweep, over the %d MB bound", float64(grown)/(1<<20), boundMB)
	}
}

// Raising the shard count on a live table is safe: an entry written under
// the old count sits on a shard D#k with k below it, which is one of the
// new count's shards, so the new count's sweeps still find it.
func TestSweepFindsEntriesOfASmallerShardCount(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	table := newTable(t)
	old, err := New(Config{DB: localtest.DynamoClient(t), Table: table, DueShards: 2, Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	loadDue(t, localtest.DynamoClient(t), old, n, storetest.Start.UnixMilli()-1_000)
	grown, err := New(Config{DB: localtest.DynamoClient(t), Table: table, DueShards: 8, Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := grown.SweepPages(ctx, nil)
	if err != nil || stats.Removed != n {
		t.Fatalf("a sweep at 8 shards over entries written at 2: %+v %v, want %d removed", stats, err, n)
	}
}

// A seal moves its job's due entry to the sealed job's next deadline
// exactly where that is cheaper than the sweep's later rewrite
// (sealMovesDue): for a live-stream job, and for a seal less than
// sealMoveWithinMs before the awaiting window ends. A seal early in the
// window leaves the entry at the window's end, and a sweep reaching it
// while the job still runs writes the real due time then.
func TestSealMovesDueEntry(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	env := protocol.SealedEnvelope{Ciphertext: "c2VhbGVk", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 4_102_444_800_000}
	due := func(id string) int64 {
		t.Helper()
		av, err := s.getRaw(ctx, jobPK("site", id), skJob)
		if err != nil || av == nil {
			t.Fatalf("read %s: %v", id, err)
		}
		return getN(av, "du")
	}
	// sealAfter enqueues id, claims it with a 60 s lease, lets wait pass and
	// seals it; it answers the grant's awaiting window end and lease expiry.
	sealAfter := func(id string, streaming bool, wait int64) (int64, int64) {
		t.Helper()
		st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small",
			Streaming: streaming, DeadlineAt: clk.Now().UnixMilli() + 3_600_000}
		if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st}); err != nil {
			t.Fatal(err)
		}
		in := faultClaim("r1")
		in.Streams = streaming
		g, err := s.Claim(ctx, in)
		if err != nil || len(g) != 1 || g[0].ID != id {
			t.Fatalf("claim %s: %v %v", id, g, err)
		}
		window := clk.Now().UnixMilli() + store.AwaitingPayloadMs
		if got := due(id); got != window {
			t.Fatalf("%s claimed: due %d, want the window's end %d", id, got, window)
		}
		clk.Advance(time.Duration(wait) * time.Millisecond)
		if res, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: id, Envelope: env}); err != nil || res.Refused != "" {
			t.Fatalf("seal %s: %+v %v", id, res, err)
		}
		return window, g[0].Lease.ExpiresAt
	}

	window, _ := sealAfter("early", false, 1_000)
	if got := due("early"); got != window {
		t.Fatalf("sealed early in the window: due %d, want it left at the window's end %d", got, window)
	}
	_, lease := sealAfter("late", false, store.AwaitingPayloadMs-sealMoveWithinMs+1)
	if got := due("late"); got != lease {
		t.Fatalf("sealed %d ms before the window's end: due %d, want the lease expiry %d", sealMoveWithinMs-1, got, lease)
	}
	_, lease = sealAfter("stream", true, 1_000)
	if got := due("stream"); got != lease {
		t.Fatalf("a live-stream job sealed early: due %d, want the lease expiry %d", got, lease)
	}

	// The entry left early is rewritten by the sweep that reaches it while
	// the job still runs, to its lease expiry: nothing is requeued.
	clk.Advance(store.AwaitingPayloadMs * time.Millisecond)
	res, err := s.Sweep(ctx)
	if err != nil || len(res.Requeued)+len(res.Removed) != 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	j, ok, err := s.readJob(ctx, jobPK("site", "early"))
	if err != nil || !ok {
		t.Fatalf("read early: %v %v", ok, err)
	}
	if got := due("early"); got != j.LeaseExp {
		t.Fatalf("after the sweep reached it: due %d, want the lease expiry %d", got, j.LeaseExp)
	}
}
