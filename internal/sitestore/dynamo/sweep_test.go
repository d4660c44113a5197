package dynamo

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// counting counts, per due partition, the due index Queries, and the
// runner item writes that landed (each is a write of the RUNNERS index).
type counting struct {
	ddb.API
	mu          sync.Mutex
	dueQueries  map[string]int
	runnerWrite atomic.Int64
}

func (c *counting) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if aws.ToString(in.IndexName) == "due" {
		p, _ := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS)
		c.mu.Lock()
		c.dueQueries[p.Value]++
		c.mu.Unlock()
	}
	return c.API.Query(ctx, in, o...)
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.API.UpdateItem(ctx, in, o...)
	if p, _ := in.Key["pk"].(*types.AttributeValueMemberS); err == nil && p != nil && strings.HasPrefix(p.Value, "RUNNER#") {
		c.runnerWrite.Add(1)
	}
	return out, err
}

func newCounting(t testing.TB) *counting {
	return &counting{API: localtest.DynamoClient(t), dueQueries: map[string]int{}}
}

// TestAnInlineSweepReadsOneShard: a claim's in-line sweep queries one due
// partition and one unblock partition, and successive claims walk every
// shard.
func TestAnInlineSweepReadsOneShard(t *testing.T) {
	ctx := context.Background()
	c := newCounting(t)
	s, err := New(Config{DB: c, Table: newTable(t), DueShards: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, sitestore.ClaimInput{RunnerID: "r", RunnerOwner: "o", Max: 1}); err != nil {
		t.Fatal(err)
	}
	if len(c.dueQueries) != 2 {
		t.Fatalf("one claim read due partitions %v, want one DUE# and one UNBLOCK#", c.dueQueries)
	}
	for range 7 {
		if _, err := s.Claim(ctx, sitestore.ClaimInput{RunnerID: "r", RunnerOwner: "o", Max: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		if c.dueQueries[shardPK(dueKey, i)] != 1 {
			t.Fatalf("8 claims over 8 shards read %v, want each DUE# shard once", c.dueQueries)
		}
	}
}

// TestOldEntriesAreFoundWhenTheShardCountChanges: entries written under
// one count (and under the unsharded key) are still fired by the full
// sweep of a store with another count.
func TestOldEntriesAreFoundWhenTheShardCountChanges(t *testing.T) {
	ctx := context.Background()
	table := newTable(t)
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	old, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Clock: clk, DueShards: 32})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := old.Create(ctx, sitestore.CreateInput{ID: fmt.Sprint("j", i), Kind: protocol.KindGenerate, Owner: "o", TTLMs: 100}); err != nil {
			t.Fatal(err)
		}
	}
	// One entry as a table from before sharding holds it.
	if _, err := old.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: key(jobPK("j0"), skJob),
		UpdateExpression: aws.String("SET dpk = :d"), ExpressionAttributeValues: map[string]types.AttributeValue{":d": str(dueKey)}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond)
	fresh, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Clock: clk, DueShards: 4, PreviousDueShards: 32})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fresh.Sweep(ctx)
	if err != nil || st.Fired != 40 || st.Shards != 33 {
		t.Fatalf("sweep after the count changed: %+v %v, want 40 fired over 33 partitions", st, err)
	}
}

// TestUnchangedHeartbeatsRarelyWriteTheRunnersIndex: heartbeats
// of an unchanged runner every 10 s for 10 minutes write the runner item
// (and so the RUNNERS index) at most once per RunnerRefreshMs, and a
// changed one is written at once.
func TestUnchangedHeartbeatsRarelyWriteTheRunnersIndex(t *testing.T) {
	ctx := context.Background()
	c := newCounting(t)
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s, err := New(Config{DB: c, Table: newTable(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p := sitestore.Pairing{DeviceCodeHash: "h", UserCode: "ABCD-EFGH", State: sitestore.PairingPending, DaemonVersion: "0.1.1",
		ExpiresAt: clk.Now().UnixMilli() + 600_000, CreatedAt: clk.Now().UnixMilli()}
	if err := s.CreatePairing(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApprovePairing(ctx, sitestore.ApproveInput{UserCode: "ABCD-EFGH", Owner: "o", RunnerID: "r"}); err != nil {
		t.Fatal(err)
	}
	const beats, every = 60, 10_000
	for range beats {
		clk.Advance(every * time.Millisecond)
		r, found, err := s.TouchRunner(ctx, sitestore.TouchInput{RunnerID: "r", DaemonVersion: "0.1.1"})
		if err != nil || !found {
			t.Fatal(found, err)
		}
		if lag := clk.Now().UnixMilli() - r.LastHeartbeatAt; lag > DefaultRunnerRefreshMs {
			t.Fatalf("stored heartbeat %d ms behind, over the %d ms bound", lag, DefaultRunnerRefreshMs)
		}
	}
	bound := int64(beats*every/DefaultRunnerRefreshMs + 1)
	if w := c.runnerWrite.Load(); w > bound || w == 0 {
		t.Fatalf("%d heartbeats wrote the runner %d times, want 1..%d", beats, w, bound)
	}
	t.Logf("%d heartbeats at %d ms wrote the RUNNERS index %d times (bound %d)", beats, every, c.runnerWrite.Load(), bound)
	before := c.runnerWrite.Load()
	r, _, err := s.TouchRunner(ctx, sitestore.TouchInput{RunnerID: "r", DaemonVersion: "0.2.0"})
	if err != nil || r.DaemonVersion != "0.2.0" || c.runnerWrite.Load() != before+1 {
		t.Fatalf("a changed runner was not written: %+v %v", r, err)
	}
}

// TestSweeperClearsALoadInBoundedMemory loads
// BYORELAY_SITESWEEP_JOBS (default 2,000; `make site-sweep-load` 100,000)
// queued jobs past their TTL straight into the table, then one Sweep
// expires them all. It reports items/s per worker and the heap the sweep
// grew by, and holds the heap under the stated bound: workers x one page.
func TestSweeperClearsALoadInBoundedMemory(t *testing.T) {
	n := 2000
	if v := os.Getenv("BYORELAY_SITESWEEP_JOBS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	table := newTable(t)
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	db := localtest.DynamoClient(t)
	s, err := New(Config{DB: db, Table: table, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	load := make(chan int)
	var wg sync.WaitGroup
	var loadErr atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := range load {
				var reqs []types.WriteRequest
				for i := start; i < min(start+25, n); i++ {
					j := sitestore.Job{ID: fmt.Sprintf("load-%06d", i), Kind: protocol.KindGenerate, Owner: "o",
						State: sitestore.StateQueued, ClaimableAt: 1_000_000 + int64(i%1000), TTLMs: 100,
						CreatedAt: 1_000_000, UpdatedAt: 1_000_000}
					item, err := itemOf(j, 1, "load", false, s.dueShards, s.retention)
					if err != nil {
						loadErr.Store(err)
						return
					}
					reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
				}
				for len(reqs) > 0 {
					out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
					if err != nil {
						loadErr.Store(err)
						return
					}
					reqs = out.UnprocessedItems[table]
				}
			}
		}()
	}
	for start := 0; start < n; start += 25 {
		load <- start
	}
	close(load)
	wg.Wait()
	if err, _ := loadErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := before.HeapAlloc
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapAlloc)
			}
		}
	}()
	began := time.Now()
	st, err := s.Sweep(ctx)
	took := time.Since(began)
	close(stop)
	<-sampled
	if err != nil || st.Fired != n || st.Failed != 0 {
		t.Fatalf("sweep: %+v %v, want %d fired", st, err, n)
	}
	if st.OldestDueAgeMs < 9_000 {
		t.Fatalf("backlog age %d ms, want the oldest entry's ~10 s", st.OldestDueAgeMs)
	}
	grew := int64(peak) - int64(before.HeapAlloc)
	// The bound: what the sweep holds does not grow with n. 16 workers
	// each with a page of 100 ids and a decoded job, plus the SDK's
	// buffers per call in flight: well under 32 MB.
	const bound = 32 << 20
	workers := min(DefaultSweepWorkers, DefaultDueShards+1)
	perWorker := float64(n) / took.Seconds() / float64(workers)
	t.Logf("swept %d due entries in %v with %d workers: %.0f items/s, %.0f items/s per worker; heap grew %.1f MB at peak (bound %d MB)",
		n, took.Round(time.Millisecond), workers, float64(n)/took.Seconds(), perWorker, float64(grew)/(1<<20), bound>>20)
	if grew > bound {
		t.Fatalf("heap grew %d bytes, over the %d bound", grew, bound)
	}
	if again, err := s.Sweep(ctx); err != nil || again.Fired != 0 || again.OldestDueAgeMs != 0 {
		t.Fatalf("second sweep: %+v %v, want nothing left", again, err)
	}
}
