package dynamo

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// laggingPointers answers eventually consistent reads of lease pointers the
// way a lagging replica may, which DynamoDB Local never does: "miss" never
// shows a pointer, "ghost" shows every pointer ever written, deleted or
// not. Lease pointers are only ever put and deleted, so these are the two
// ways such a read can be wrong.
type laggingPointers struct {
	API
	ghost bool
	mu    sync.Mutex
	seen  map[string]map[string]types.AttributeValue
}

func (l *laggingPointers) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := l.API.TransactWriteItems(ctx, in, o...)
	if err == nil {
		l.mu.Lock()
		for _, it := range in.TransactItems {
			if it.Put != nil && strings.HasPrefix(getS(it.Put.Item, "pk"), "L#") {
				l.seen[getS(it.Put.Item, "pk")] = it.Put.Item
			}
		}
		l.mu.Unlock()
	}
	return out, err
}

func (l *laggingPointers) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk := getS(in.Key, "pk")
	if aws.ToBool(in.ConsistentRead) || !strings.HasPrefix(pk, "L#") {
		return l.API.GetItem(ctx, in, o...)
	}
	if !l.ghost {
		return &dynamodb.GetItemOutput{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return &dynamodb.GetItemOutput{Item: l.seen[pk]}, nil
}

// TestHolderCallsAnswerTheSameWhateverThePointerReadShows drives fetch,
// result, renewal and release through their answers and refusals while the
// lease pointer reads lag: an eventually consistent pointer read may cost a
// consistent re-read, never change an answer.
func TestHolderCallsAnswerTheSameWhateverThePointerReadShows(t *testing.T) {
	for _, ghost := range []bool{false, true} {
		name := map[bool]string{false: "missing-pointers", true: "deleted-pointers-shown"}[ghost]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := store.NewManualClock(storetest.Start)
			s := replica(t, newTable(t), store.Options{Clock: clock}, func(a API) API {
				return &laggingPointers{API: a, ghost: ghost, seen: map[string]map[string]types.AttributeValue{}}
			})
			st := protocol.JobStub{ID: "a", Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
			if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: "a", SiteID: "site", Stub: st}); err != nil {
				t.Fatal(err)
			}
			claim := func() string {
				t.Helper()
				g, err := s.Claim(ctx, faultClaim("r1"))
				if err != nil || len(g) != 1 {
					t.Fatalf("claim: %v %v", g, err)
				}
				return g[0].Lease.ID
			}
			seal := func() {
				t.Helper()
				if r, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}}); err != nil || r.Refused != "" {
					t.Fatalf("seal: %+v %v", r, err)
				}
			}
			take := func(runner, lease string, want store.Refusal) {
				t.Helper()
				r, err := s.TakePayload(ctx, store.HolderInput{JobID: "a", RunnerID: runner, LeaseID: lease})
				if err != nil || r.Refused != want || (want == "") != (r.Envelope != nil) {
					t.Fatalf("take(%s): %+v %v, want refusal %q", runner, r, err, want)
				}
			}
			complete := func(lease string, want store.CompleteResult) {
				t.Helper()
				r, err := s.Complete(ctx, store.CompleteInput{JobID: "a", RunnerID: "r1", LeaseID: lease,
					Envelope: protocol.SealedEnvelope{Ciphertext: "result"}, Disposition: store.DispositionOK})
				if err != nil || r != want {
					t.Fatalf("complete: %+v %v, want %+v", r, err, want)
				}
			}

			first := claim()
			take("r1", first, store.RefusedNotReady)
			seal()
			take("r2", first, store.RefusedNotHolder)
			take("r1", first, "")
			renewed, err := s.RenewLeases(ctx, store.RenewInput{RunnerID: "r1", LeaseMs: 60_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(renewed.Renewed) != 1 || len(renewed.Lost) != 0 {
				t.Fatalf("renew: %+v %v", renewed, err)
			}
			released, err := s.ReleaseLeases(ctx, store.ReleaseInput{RunnerID: "r1", Reason: store.ReleaseShutdown, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(released) != 1 {
				t.Fatalf("release: %v %v", released, err)
			}

			// The first grant is over; the same runner holds the job again.
			second := claim()
			seal()
			take("r1", first, store.RefusedStaleLease)
			complete(first, store.CompleteResult{Refused: store.RefusedStaleLease})
			renewed, err = s.RenewLeases(ctx, store.RenewInput{RunnerID: "r1", LeaseMs: 60_000, Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first}}})
			if err != nil || len(renewed.Renewed) != 0 || len(renewed.Lost) != 1 {
				t.Fatalf("renew of the first grant: %+v %v", renewed, err)
			}
			complete(second, store.CompleteResult{Accepted: true, State: store.StateDone})
			complete(second, store.CompleteResult{Duplicate: true, State: store.StateDone})
			take("r1", second, store.RefusedTerminal)
			if r, err := s.TakePayload(ctx, store.HolderInput{JobID: "b", RunnerID: "r1", LeaseID: second}); err != nil || r.Refused != store.RefusedNotFound {
				t.Fatalf("take of another job id: %+v %v", r, err)
			}
		})
	}
}
