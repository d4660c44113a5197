package dynamo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// BenchmarkClaimCapacity shows the read and write capacity one Claim
// consumes with 100, 10,000 and 100,000 jobs queued for the claiming
// device's route. It must be flat: a claim reads a bounded number of
// candidates from the queue index and the due index, whatever the depth.
//
//	go test -run '^$' -bench ClaimCapacity -benchtime 20x ./store/dynamo/
//
// DynamoDB Local computes consumed capacity from the item sizes a request
// reads and writes, but reports 0 for a query that finds nothing, where the
// service bills a minimum of 0.5 RCU: the requests/claim figure counts
// those (here the due-index shards and the empty sticky partition).
func BenchmarkClaimCapacity(b *testing.B) {
	for _, depth := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) {
			ctx := context.Background()
			meter := &ddb.Meter{}
			clk := clock.NewManual(storetest.Start)
			table := newTable(b)
			s, err := New(Config{DB: localtest.DynamoClient(b), Table: table, Options: store.Options{Clock: clk}, Meter: meter})
			if err != nil {
				b.Fatal(err)
			}
			loadQueue(b, localtest.DynamoClient(b), s, depth)
			in := store.ClaimInput{
				RunnerID: "runner", Owner: "alice", Device: protocol.PublicIdentity{Identity: "id"},
				Routes: []store.Route{{SiteID: "site", Owner: "alice"}}, Kinds: []string{"llm.generate"},
				Max: 1, LeaseMs: 60_000,
			}
			var read, write float64
			calls := 0
			b.ResetTimer()
			for range b.N {
				meter.Reset()
				granted, err := s.Claim(ctx, in)
				if err != nil || len(granted) != 1 {
					b.Fatalf("claim: %v %v", granted, err)
				}
				used := meter.Total()
				read += used.ReadUnits
				write += used.WriteUnits
				calls += used.Calls
				// Give it back so the depth stays put (not measured).
				b.StopTimer()
				if _, err := s.ReleaseLeases(ctx, store.ReleaseInput{RunnerID: "runner",
					Leases: []protocol.GrantRef{{JobID: granted[0].ID, LeaseID: granted[0].Lease.ID}}}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(read/float64(b.N), "RCU/claim")
			b.ReportMetric(write/float64(b.N), "WCU/claim")
			b.ReportMetric(float64(calls)/float64(b.N), "requests/claim")
		})
	}
}

// loadQueue writes n queued jobs for (site, alice), due far ahead.
func loadQueue(b *testing.B, db *dynamodb.Client, s *Store, n int) {
	now := s.now()
	writeQueued(b, db, s, n, func(i int) (string, int64, int64) {
		return fmt.Sprintf("job-%06d", i), 4_102_444_800_000, now
	})
}

// writeQueued writes n queued jobs for (site, alice) with BatchWriteItem,
// in parallel: the items Enqueue would write, without a conditional put
// each. job names the i-th job's id, deadline and enqueue time.
func writeQueued(tb testing.TB, db *dynamodb.Client, s *Store, n int, job func(i int) (id string, deadline, enqueuedAt int64)) {
	tb.Helper()
	ctx := context.Background()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch []types.WriteRequest
			flush := func() error {
				req := map[string][]types.WriteRequest{s.table: batch}
				for len(req) > 0 && len(req[s.table]) > 0 {
					out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req})
					if err != nil {
						return err
					}
					req = out.UnprocessedItems
				}
				batch = batch[:0]
				return nil
			}
			for i := w; i < n; i += workers {
				id, deadline, enqueuedAt := job(i)
				st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: deadline}
				j := &jobItem{PK: jobPK("site", id), SK: skJob, Site: "site", JobID: id, Owner: "alice", Kind: st.Kind, Audience: st.Audience,
					Deadline: deadline, State: string(store.StateQueued), Ver: 1, WID: "load", Seq: fmt.Sprintf("%013d.%016d", enqueuedAt, i)}
				stub, _ := json.Marshal(st)
				j.Stub = string(stub)
				j.index(s.shards, s.finishedShards)
				item, err := j.marshal()
				if err != nil {
					errs <- err
					return
				}
				batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
				if len(batch) == 25 {
					if err := flush(); err != nil {
						errs <- err
						return
					}
				}
			}
			if len(batch) > 0 {
				if err := flush(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
