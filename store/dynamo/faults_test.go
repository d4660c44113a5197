package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// fault is one kind of failure DynamoDB Local never produces.
type fault int

const (
	noFault fault = iota
	// conflict: a transaction cancelled by another in flight on one of its
	// items. Nothing was written.
	conflict
	// conditionFailed: a write refused as if its condition failed (another
	// replica changed the item). Nothing was written.
	conditionFailed
	// throttled: the request was refused for capacity. Nothing was written.
	throttled
	// lostAck: the write committed, and the caller saw an error.
	lostAck
)

func (f fault) String() string {
	return [...]string{"none", "conflict", "condition", "throttled", "lost-ack"}[f]
}

// faulty wraps a client and injects faults: either the next ones queued by a
// scenario, or at random at the given rate.
type faulty struct {
	ddb.API
	mu     sync.Mutex
	queued map[string][]fault // by operation name
	rate   float64
	rng    *rand.Rand
	counts map[fault]int
	// afterLostAck, when set, runs once a lost acknowledgement's write has
	// committed and before the caller sees the error: another replica's
	// call landing in that window.
	afterLostAck func()
}

func newFaulty(api ddb.API, rate float64, seed uint64) *faulty {
	return &faulty{API: api, queued: map[string][]fault{}, rate: rate, rng: rand.New(rand.NewPCG(seed, 7)), counts: map[fault]int{}}
}

// next queues faults for the next calls of one operation.
func (f *faulty) next(op string, faults ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued[op] = append(f.queued[op], faults...)
}

func (f *faulty) pick(op string, choices ...fault) fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q := f.queued[op]; len(q) > 0 {
		f.queued[op] = q[1:]
		f.counts[q[0]]++
		return q[0]
	}
	rate := f.rate
	if len(choices) == 1 && choices[0] == throttled {
		// Reads: the SDK retries throttling itself, so fewer surface.
		rate /= 4
	}
	if rate == 0 || f.rng.Float64() >= rate {
		return noFault
	}
	c := choices[f.rng.IntN(len(choices))]
	f.counts[c]++
	return c
}

var (
	errThrottled = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "injected: rate of requests exceeds the allowed throughput"}
	errLostAck   = errors.New("injected: connection reset after the request was sent")
)

func conflictErr() error {
	return &types.TransactionCanceledException{
		Message:             aws.String("injected: transaction cancelled"),
		CancellationReasons: []types.CancellationReason{{Code: aws.String("TransactionConflict")}},
	}
}

// write runs a write under the chosen fault.
func write[O any](f *faulty, op string, choices []fault, call func() (O, error), condErr error) (O, error) {
	var zero O
	switch f.pick(op, choices...) {
	case conflict:
		if op != "TransactWriteItems" {
			// A plain write on an item a transaction holds.
			return zero, &types.TransactionConflictException{Message: aws.String("injected")}
		}
		return zero, conflictErr()
	case conditionFailed:
		return zero, condErr
	case throttled:
		return zero, errThrottled
	case lostAck:
		if _, err := call(); err != nil {
			return zero, err
		}
		if f.afterLostAck != nil {
			f.afterLostAck()
		}
		return zero, errLostAck
	}
	return call()
}

// queuedFor reports whether faults are queued for op.
func (f *faulty) queuedFor(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queued[op]) > 0
}

// PutItem injects faults queued for "PutItem J" into the next writes of a
// job item only (a claim also writes a hint and maybe a lease tag first),
// else those queued for "PutItem", else at random.
func (f *faulty) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	op := "PutItem"
	if getS(in.Item, "sk") == skJob && f.queuedFor("PutItem J") {
		op = "PutItem J"
	}
	return write(f, op, []fault{conflict, conditionFailed, throttled, lostAck, lostAck},
		func() (*dynamodb.PutItemOutput, error) { return f.API.PutItem(ctx, in, o...) },
		&types.ConditionalCheckFailedException{Message: aws.String("injected")})
}

func (f *faulty) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return write(f, "DeleteItem", []fault{conflict, conditionFailed, throttled, lostAck, lostAck},
		func() (*dynamodb.DeleteItemOutput, error) { return f.API.DeleteItem(ctx, in, o...) },
		&types.ConditionalCheckFailedException{Message: aws.String("injected")})
}

func (f *faulty) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return write(f, "TransactWriteItems", []fault{conflict, conditionFailed, throttled, lostAck, lostAck},
		func() (*dynamodb.TransactWriteItemsOutput, error) { return f.API.TransactWriteItems(ctx, in, o...) },
		&types.TransactionCanceledException{Message: aws.String("injected"), CancellationReasons: []types.CancellationReason{{Code: aws.String("ConditionalCheckFailed")}}})
}

// UpdateItem carries the pair sets' writes (a claim's member, a freed
// slot, the set's check) and the cancel list's. No spurious condition
// failure at random: for a claim's member it is indistinguishable from a
// full set, a legal answer the scenarios cover.
func (f *faulty) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return write(f, "UpdateItem", []fault{conflict, throttled, lostAck, lostAck},
		func() (*dynamodb.UpdateItemOutput, error) { return f.API.UpdateItem(ctx, in, o...) },
		&types.ConditionalCheckFailedException{Message: aws.String("injected")})
}

func (f *faulty) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.pick("GetItem", throttled) == throttled {
		return nil, errThrottled
	}
	return f.API.GetItem(ctx, in, o...)
}

func (f *faulty) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if f.pick("Query", throttled) == throttled {
		return nil, errThrottled
	}
	return f.API.Query(ctx, in, o...)
}

func (f *faulty) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	switch f.pick("TransactGetItems", throttled, conflict) {
	case throttled:
		return nil, errThrottled
	case conflict:
		return nil, conflictErr()
	}
	return f.API.TransactGetItems(ctx, in, o...)
}

// faultEnv is one store over a fresh table behind a fault injector, and a
// clean replica to look at the table with.
type faultEnv struct {
	t     *testing.T
	ctx   context.Context
	f     *faulty
	s     *Store
	clean *Store
}

func newFaultEnv(t *testing.T) *faultEnv {
	clk := clock.NewManual(storetest.Start)
	table := newTable(t)
	e := &faultEnv{t: t, ctx: context.Background()}
	e.s = replica(t, table, store.Options{Clock: clk}, func(a ddb.API) ddb.API {
		e.f = newFaulty(a, 0, 1)
		return e.f
	})
	e.clean = replica(t, table, store.Options{Clock: clk}, nil)
	return e
}

func (e *faultEnv) enqueue(id string) {
	e.t.Helper()
	st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
	if _, err := e.clean.Enqueue(e.ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st}); err != nil {
		e.t.Fatal(err)
	}
}

func faultClaim(runner string) store.ClaimInput {
	return store.ClaimInput{
		RunnerID: runner, Owner: "alice", Device: protocol.PublicIdentity{Identity: "id-" + runner},
		Routes: []store.Route{{SiteID: "site", Owner: "alice"}}, Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 60_000,
	}
}

// held is the job as the clean replica sees it, with the pair's unsealed set.
func (e *faultEnv) held(id string) (store.Job, []string) {
	e.t.Helper()
	j, ok, err := e.clean.Job(e.ctx, "site", id)
	if err != nil || !ok {
		e.t.Fatalf("job %s: ok=%v err=%v", id, ok, err)
	}
	av, err := e.clean.getRaw(e.ctx, unsealedPK("site", unsealedShard("alice", e.clean.unsealedShards)), unsealedSK("alice"))
	if err != nil {
		e.t.Fatal(err)
	}
	return j, heldLeases(av)
}

// heldLeases is the lease ids in an unsealed set item.
func heldLeases(av map[string]types.AttributeValue) []string {
	var out []string
	for _, m := range getSS(av, "held") {
		lease, _, _ := strings.Cut(m, "\x00")
		out = append(out, lease)
	}
	return out
}

// TestFaultsClaimAnswersOnceWhateverDynamoDBDoes claims one job through each
// kind of fault on each of the claim's two writes (the pair's set, then the
// job): the caller gets the grant that is stored (a lost acknowledgement is
// recovered by writing the set again or reading the job back), exactly one
// grant exists, and the pair's unsealed set holds exactly it (a job write
// that lost its race gave its member back).
func TestFaultsClaimAnswersOnceWhateverDynamoDBDoes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     string
		faults []fault
	}{
		{"the set: a conflict", "UpdateItem", []fault{conflict}},
		{"the set: throttling", "UpdateItem", []fault{throttled, throttled}},
		{"the set: a lost acknowledgement", "UpdateItem", []fault{lostAck}},
		{"the set: a lost acknowledgement and then throttling", "UpdateItem", []fault{lostAck, throttled}},
		{"the job: a conflict", "PutItem J", []fault{conflict}},
		{"the job: a spurious condition failure", "PutItem J", []fault{conditionFailed}},
		{"the job: throttling", "PutItem J", []fault{throttled, throttled}},
		{"the job: a lost acknowledgement", "PutItem J", []fault{lostAck}},
		{"the job: a lost acknowledgement and then throttling", "PutItem J", []fault{lostAck, throttled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t)
			e.enqueue("a")
			e.f.next(tc.op, tc.faults...)
			granted, err := e.s.Claim(e.ctx, faultClaim("r1"))
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			if len(granted) != 1 {
				t.Fatalf("granted %d jobs, want 1", len(granted))
			}
			j, held := e.held("a")
			if j.State != store.StateAwaitingPayload || j.ClaimedBy == nil || j.ClaimedBy.LeaseID != granted[0].Lease.ID {
				t.Fatalf("stored %s under %+v, caller was told lease %s", j.State, j.ClaimedBy, granted[0].Lease.ID)
			}
			if len(held) != 1 || held[0] != granted[0].Lease.ID {
				t.Fatalf("unsealed set %v, want just %s", held, granted[0].Lease.ID)
			}
			// And nobody else can have it.
			again, err := e.clean.Claim(e.ctx, faultClaim("r2"))
			if err != nil || len(again) != 0 {
				t.Fatalf("second claim: %v, %v", again, err)
			}
		})
	}
}

// TestFaultsClaimKeepsAGrantSealedBeforeALostAck: the claim's
// job write commits, its acknowledgement is lost, and the site seals the job
// before the claim reads it back. The read-back finds the seal's image, not
// the grant's, and the claim must still answer the grant it made: told
// otherwise, the device never hears of a job that is ready under its lease.
func TestFaultsClaimKeepsAGrantSealedBeforeALostAck(t *testing.T) {
	e := newFaultEnv(t)
	e.enqueue("a")
	e.f.next("PutItem J", lostAck)
	e.f.afterLostAck = func() {
		e.f.afterLostAck = nil
		res, err := e.clean.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}})
		if err != nil || res.State != store.StateReady {
			t.Errorf("seal in the lost acknowledgement's window: %+v %v", res, err)
		}
	}
	granted, err := e.s.Claim(e.ctx, faultClaim("r1"))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	j, _ := e.held("a")
	if len(granted) != 1 {
		t.Fatalf("granted %d jobs, want 1 (stored %s under %+v)", len(granted), j.State, j.ClaimedBy)
	}
	if j.State != store.StateReady || j.ClaimedBy == nil || j.ClaimedBy.LeaseID != granted[0].Lease.ID {
		t.Fatalf("stored %s under %+v, caller was told lease %s", j.State, j.ClaimedBy, granted[0].Lease.ID)
	}
	res, err := e.clean.TakePayload(e.ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: granted[0].Lease.ID})
	if err != nil || res.Envelope == nil {
		t.Fatalf("take under the answered lease: %+v %v", res, err)
	}
}

// TestFaultsWritesKeepTheirAnswerAcrossOverwrites:
// a seal, a completion or a release commits, its acknowledgement is lost,
// and another call writes the job before the read-back (a fetch, a lease
// renewal, a claim). The read-back finds the later image, not this write's,
// and the caller must still be told that its write took effect: a seal told
// too-late after the device took its payload, a result told "duplicate"
// (and its object dropped) that is the one recorded, a release told no
// after the job went to another runner.
func TestFaultsWritesKeepTheirAnswerAcrossOverwrites(t *testing.T) {
	payload := protocol.SealedEnvelope{Ciphertext: "p"}
	result := protocol.SealedEnvelope{Ciphertext: "result"}
	// grant claims a for r1 through the clean replica, sealed and taken
	// when asked.
	grant := func(e *faultEnv, seal, take bool) string {
		t.Helper()
		e.enqueue("a")
		g, err := e.clean.Claim(e.ctx, faultClaim("r1"))
		if err != nil || len(g) != 1 {
			t.Fatalf("claim: %v %v", g, err)
		}
		lease := g[0].Lease.ID
		if seal {
			if res, err := e.clean.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: payload}); err != nil || res.State != store.StateReady {
				t.Fatalf("seal: %+v %v", res, err)
			}
		}
		if take {
			if res, err := e.clean.TakePayload(e.ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: lease}); err != nil || res.Envelope == nil {
				t.Fatalf("take: %+v %v", res, err)
			}
		}
		return lease
	}
	// inWindow runs call once the next job write's acknowledgement is lost.
	inWindow := func(e *faultEnv, what string, call func() error) {
		e.f.next("PutItem J", lostAck)
		e.f.afterLostAck = func() {
			e.f.afterLostAck = nil
			if err := call(); err != nil {
				t.Errorf("%s in the lost acknowledgement's window: %v", what, err)
			}
		}
	}
	renew := func(e *faultEnv, lease string) func() error {
		return func() error {
			res, err := e.clean.RenewLeases(e.ctx, store.RenewInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: lease}}, LeaseMs: 60_000})
			if err == nil && len(res.Renewed) != 1 {
				err = fmt.Errorf("not renewed: %+v", res)
			}
			return err
		}
	}

	t.Run("seal, then the device takes the payload", func(t *testing.T) {
		e := newFaultEnv(t)
		lease := grant(e, false, false)
		inWindow(e, "take", func() error {
			res, err := e.clean.TakePayload(e.ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: lease})
			if err == nil && res.Envelope == nil {
				err = fmt.Errorf("no payload: %+v", res)
			}
			return err
		})
		res, err := e.s.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: payload})
		if err != nil || res.State != store.StateReady || res.Refused != "" {
			t.Fatalf("seal: %+v %v, want ready", res, err)
		}
		if j, held := e.held("a"); j.State != store.StateRunning || j.Payload == nil || len(held) != 0 {
			t.Fatalf("stored %s, payload %v, unsealed set %v", j.State, j.Payload, held)
		}
	})

	for _, tc := range []struct {
		name        string
		seal, take  bool
		overwriting func(e *faultEnv, lease string) (string, func() error)
	}{
		{"complete from running, then a renewal", true, true, func(e *faultEnv, lease string) (string, func() error) { return "renewal", renew(e, lease) }},
		{"complete from ready, then a renewal", true, false, func(e *faultEnv, lease string) (string, func() error) { return "renewal", renew(e, lease) }},
		{"complete unsealed, then a cancel", false, false, func(e *faultEnv, lease string) (string, func() error) {
			return "cancel", func() error {
				ok, err := e.clean.Cancel(e.ctx, "site", "a")
				if err == nil && !ok {
					err = errors.New("not cancelled")
				}
				return err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t)
			lease := grant(e, tc.seal, tc.take)
			what, call := tc.overwriting(e, lease)
			inWindow(e, what, call)
			res, err := e.s.Complete(e.ctx, store.CompleteInput{JobID: "a", RunnerID: "r1", LeaseID: lease, Envelope: result, Disposition: store.DispositionOK})
			if err != nil || !res.Accepted || res.Duplicate {
				t.Fatalf("complete: %+v %v, want accepted", res, err)
			}
			finished, err := e.clean.Finished(e.ctx, "site", 0)
			if err != nil || len(finished) != 1 || finished[0].Result.Ciphertext != "result" {
				t.Fatalf("finished: %+v %v", finished, err)
			}
			if _, held := e.held("a"); len(held) != 0 {
				t.Fatalf("unsealed set after the completion: %v", held)
			}
		})
	}

	t.Run("release, then another runner claims the job", func(t *testing.T) {
		e := newFaultEnv(t)
		lease := grant(e, true, false)
		inWindow(e, "claim", func() error {
			g, err := e.clean.Claim(e.ctx, faultClaim("r2"))
			if err == nil && len(g) != 1 {
				err = fmt.Errorf("granted %d jobs, want 1", len(g))
			}
			return err
		})
		released, err := e.s.ReleaseLeases(e.ctx, store.ReleaseInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: lease}}, Reason: store.ReleaseShutdown})
		if err != nil || len(released) != 1 {
			t.Fatalf("release: %v %v, want a released", released, err)
		}
		if j, _ := e.held("a"); j.ClaimedBy == nil || j.ClaimedBy.RunnerID != "r2" {
			t.Fatalf("stored %s under %+v, want r2's grant", j.State, j.ClaimedBy)
		}
	})
}

// TestFaultsTakeKeepsItsAnswerAcrossARenewal: a fetch's write commits
// (ready to running), its acknowledgement is lost, and a heartbeat renews
// the lease before the read-back, writing over the fetch's wid. The fetch
// leaves no mark, so its read-back cannot recognise its write; it is told
// it lost a race, reads the job again, finds it running under its own
// lease and answers the envelope, without writing again. Answered
// otherwise, the device would give up a job the store has running for it.
func TestFaultsTakeKeepsItsAnswerAcrossARenewal(t *testing.T) {
	e := newFaultEnv(t)
	e.enqueue("a")
	g, err := e.clean.Claim(e.ctx, faultClaim("r1"))
	if err != nil || len(g) != 1 {
		t.Fatalf("claim: %v %v", g, err)
	}
	lease := g[0].Lease.ID
	if res, err := e.clean.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}}); err != nil || res.State != store.StateReady {
		t.Fatalf("seal: %+v %v", res, err)
	}
	version := func() (int64, string) {
		t.Helper()
		j, ok, err := e.clean.readJob(e.ctx, jobPK("site", "a"))
		if err != nil || !ok {
			t.Fatalf("read a: ok=%v err=%v", ok, err)
		}
		return j.Ver, j.WID
	}
	sealed, _ := version()
	var renewedWID string
	e.f.next("PutItem J", lostAck)
	e.f.afterLostAck = func() {
		e.f.afterLostAck = nil
		res, err := e.clean.RenewLeases(e.ctx, store.RenewInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: lease}}, LeaseMs: 60_000})
		if err != nil || len(res.Renewed) != 1 {
			t.Errorf("renewal in the lost acknowledgement's window: %+v %v", res, err)
		}
		_, renewedWID = version()
	}
	res, err := e.s.TakePayload(e.ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: lease})
	if err != nil || res.Refused != "" || res.Envelope == nil || res.Envelope.Ciphertext != "p" {
		t.Fatalf("take: %+v %v, want the envelope", res, err)
	}
	if e.f.counts[lostAck] != 1 || renewedWID == "" {
		t.Fatalf("%d acknowledgements lost, renewal wid %q: the window was not exercised", e.f.counts[lostAck], renewedWID)
	}
	j, _ := e.held("a")
	if j.State != store.StateRunning || j.ClaimedBy == nil || j.ClaimedBy.LeaseID != lease || j.Payload == nil {
		t.Fatalf("stored %s under %+v, payload %v; want running under %s", j.State, j.ClaimedBy, j.Payload, lease)
	}
	// One write by the fetch and one by the renewal, and the renewal's is
	// the last: the fetch did not write running a second time.
	if ver, wid := version(); ver != sealed+2 || wid != renewedWID {
		t.Fatalf("version %d (wid %s), want %d (the renewal's %s)", ver, wid, sealed+2, renewedWID)
	}
}

// TestFaultsHolderCallsAnswerCorrectly drives a grant through seal, fetch,
// complete and release with each fault on the write that decides it.
func TestFaultsHolderCallsAnswerCorrectly(t *testing.T) {
	for _, f := range []fault{conflict, conditionFailed, throttled, lostAck, lostAck} {
		name := map[fault]string{conflict: "conflict", conditionFailed: "condition", throttled: "throttled", lostAck: "lost-ack"}[f]
		t.Run(name, func(t *testing.T) {
			e := newFaultEnv(t)
			e.enqueue("a")
			e.enqueue("b")
			g, err := e.clean.Claim(e.ctx, faultClaim("r1"))
			if err != nil || len(g) != 1 {
				t.Fatalf("claim: %v %v", g, err)
			}
			lease := g[0].Lease.ID

			// Seal is a single conditional put; the pair's slot is freed
			// after it.
			e.f.next("PutItem", f)
			if res, err := e.s.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: protocol.SealedEnvelope{Ciphertext: "p"}}); err != nil || res.State != store.StateReady {
				t.Fatalf("seal: %+v %v", res, err)
			}
			if _, held := e.held("a"); len(held) != 0 {
				t.Fatalf("unsealed set after seal: %v", held)
			}

			// Fetch is a single conditional put.
			e.f.next("PutItem", f)
			res, err := e.s.TakePayload(e.ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: lease})
			if err != nil || res.Envelope == nil || res.Envelope.Ciphertext != "p" {
				t.Fatalf("take: %+v %v", res, err)
			}

			// Complete from running is a single conditional put: the caller
			// that recorded the result is told so, not "duplicate".
			e.f.next("PutItem", f)
			done, err := e.s.Complete(e.ctx, store.CompleteInput{JobID: "a", RunnerID: "r1", LeaseID: lease,
				Envelope: protocol.SealedEnvelope{Ciphertext: "result"}, Disposition: store.DispositionOK})
			if err != nil || !done.Accepted || done.Duplicate {
				t.Fatalf("complete: %+v %v", done, err)
			}
			finished, err := e.clean.Finished(e.ctx, "site", 0)
			if err != nil || len(finished) != 1 || finished[0].Result.Ciphertext != "result" {
				t.Fatalf("finished: %+v %v", finished, err)
			}

			// Release of an unsealed grant is a single conditional put; the
			// pair's slot is freed after it.
			g2, err := e.clean.Claim(e.ctx, faultClaim("r1"))
			if err != nil || len(g2) != 1 {
				t.Fatalf("claim b: %v %v", g2, err)
			}
			e.f.next("PutItem", f)
			released, err := e.s.ReleaseLeases(e.ctx, store.ReleaseInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "b", LeaseID: g2[0].Lease.ID}}, Reason: store.ReleaseShutdown})
			if err != nil || len(released) != 1 {
				t.Fatalf("release: %v %v", released, err)
			}
			if j, held := e.held("b"); j.State != store.StateQueued || j.ClaimedBy != nil || len(held) != 0 {
				t.Fatalf("after release: %s %+v unsealed %v", j.State, j.ClaimedBy, held)
			}
			if e.f.counts[f] != 4 {
				t.Fatalf("%d faults injected, want 4 (seal, fetch, complete, release)", e.f.counts[f])
			}
		})
	}
}

// freezer blocks the first write of a job item into awaiting-payload until
// released: a claiming replica frozen between its two writes (the pair's
// set, then the job).
type freezer struct {
	ddb.API
	once    sync.Once
	frozen  chan struct{}
	release chan struct{}
}

func (f *freezer) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if getS(in.Item, "sk") == skJob && getS(in.Item, "st") == string(store.StateAwaitingPayload) {
		f.once.Do(func() {
			close(f.frozen)
			<-f.release
		})
	}
	return f.API.PutItem(ctx, in, o...)
}

// TestFaultsClaimFrozenBetweenItsWritesKeepsTheCap freezes a claim after
// its member is in the pair's set and before its job write; the set's check
// runs once the member's window is past and removes it (the job is still
// queued); other claims fill the pair; then the frozen job write lands. The
// grant it lands is already past its awaiting window, so the pair never has
// more than UnsealedPerPair live unsealed grants, the site is never offered
// it, and the sweep puts the job back: nothing is lost.
func TestFaultsClaimFrozenBetweenItsWritesKeepsTheCap(t *testing.T) {
	clk := clock.NewManual(storetest.Start)
	table := newTable(t)
	ctx := context.Background()
	f := &freezer{frozen: make(chan struct{}), release: make(chan struct{})}
	frozen := replica(t, table, store.Options{Clock: clk}, func(a ddb.API) ddb.API { f.API = a; return f })
	clean := replica(t, table, store.Options{Clock: clk}, nil)
	enqueue := func(id, kind string) {
		t.Helper()
		st := protocol.JobStub{ID: id, Kind: kind, Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: 4_102_444_800_000}
		if _, err := clean.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st}); err != nil {
			t.Fatal(err)
		}
	}
	// The frozen claim asks for a kind nobody else takes, so its job is
	// still queued under the version it judged when its write lands.
	enqueue("slow", protocol.KindChat)
	for i := range store.UnsealedPerPair {
		enqueue(fmt.Sprintf("j%d", i), "llm.generate")
	}
	claim := func(runner, kind string, max int) store.ClaimInput {
		in := faultClaim(runner)
		in.Kinds, in.Max = []string{kind}, max
		return in
	}

	type answer struct {
		granted []store.Claimed
		err     error
	}
	late := make(chan answer, 1)
	go func() {
		g, err := frozen.Claim(ctx, claim("r-frozen", protocol.KindChat, 1))
		late <- answer{g, err}
	}()
	select {
	case <-f.frozen:
	case a := <-late:
		t.Fatalf("the claim did not reach its job write: %v %v", a.granted, a.err)
	}
	setHolds := func() []string {
		t.Helper()
		av, err := clean.getRaw(ctx, unsealedPK("site", unsealedShard("alice", clean.unsealedShards)), unsealedSK("alice"))
		if err != nil {
			t.Fatal(err)
		}
		return heldLeases(av)
	}
	if held := setHolds(); len(held) != 1 {
		t.Fatalf("while frozen the set holds %v, want the frozen claim's member", held)
	}

	// Within the member's window (and its slack) the check leaves it.
	clk.Advance(store.AwaitingPayloadMs * time.Millisecond)
	if _, err := clean.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if held := setHolds(); len(held) != 1 {
		t.Fatalf("the check removed a member inside its window: set %v", held)
	}
	// Past it, the check finds the job not awaiting under that lease.
	clk.Advance((store.AwaitingPayloadMs + 1) * time.Millisecond)
	if _, err := clean.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if held := setHolds(); len(held) != 0 {
		t.Fatalf("the check left a member whose window is past: set %v", held)
	}
	g, err := clean.Claim(ctx, claim("r-clean", protocol.KindGenerate, store.UnsealedPerPair))
	if err != nil || len(g) != store.UnsealedPerPair {
		t.Fatalf("claims filling the pair: %v %v", g, err)
	}

	close(f.release)
	a := <-late
	if a.err != nil {
		t.Fatalf("frozen claim: %v", a.err)
	}
	now := clock.EpochMs(clk.Now())
	all, err := clean.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, j := range all {
		if j.State == store.StateAwaitingPayload && j.AwaitingUntil > now {
			live++
		}
		if j.ID == "slow" && len(a.granted) == 1 && (j.State != store.StateAwaitingPayload || j.AwaitingUntil > now) {
			t.Fatalf("the late job write landed %s until %d (now %d), want a grant already past its window", j.State, j.AwaitingUntil, now)
		}
	}
	if live > store.UnsealedPerPair {
		t.Fatalf("%d live unsealed grants, cap %d", live, store.UnsealedPerPair)
	}
	pending, err := clean.Awaiting(ctx, "site")
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != store.UnsealedPerPair {
		t.Fatalf("the site is offered %d grants, want the %d live ones", len(pending), store.UnsealedPerPair)
	}
	for _, j := range pending {
		if j.ID == "slow" {
			t.Fatal("the site is offered the lapsed grant")
		}
	}
	// The sweep ends the lapsed grant and the job is claimable again.
	if _, err := clean.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	j, ok, err := clean.Job(ctx, "site", "slow")
	if err != nil || !ok || j.State != store.StateQueued {
		t.Fatalf("after the sweep: %+v ok=%v err=%v", j, ok, err)
	}
	if held := setHolds(); len(held) != store.UnsealedPerPair {
		t.Fatalf("after the sweep the set holds %v, want the %d live grants", held, store.UnsealedPerPair)
	}
}
