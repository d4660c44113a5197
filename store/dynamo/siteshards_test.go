package dynamo

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// Raising a site's shard counts on a live table loses no set and no
// finished entry: a table written under count 1 (the unsharded layout,
// whose keys are shard 0's) read by a store with the default counts still
// lists every unsealed grant and every result, lists the new ones beside
// them, and the set's own check empties the old set once its grants are
// sealed.
func TestRaisingTheSiteShardCountsLosesNothing(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	table := newTable(t)
	open := func(unsealed, finished int) *Store {
		t.Helper()
		s, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Options: store.Options{Clock: clk},
			DueShards: 4, UnsealedShards: unsealed, FinishedShards: finished})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const site = "site"
	owners := []string{"alice", "bob", "carol", "dave", "erin"}
	now := func() int64 { return clock.EpochMs(clk.Now()) }
	envelope := func(direction string, deadline int64) protocol.SealedEnvelope {
		return protocol.SealedEnvelope{Ciphertext: "c", RecipientKeyID: "r", SenderKeyID: "s", Direction: direction, DeadlineAt: deadline}
	}
	enqueue := func(s *Store, id, owner string) {
		t.Helper()
		if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: site, Stub: protocol.JobStub{
			ID: id, Kind: "llm.generate", Owner: owner, Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: now() + 600_000,
		}}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(s *Store, id, owner string) store.Claimed {
		t.Helper()
		g, err := s.Claim(ctx, store.ClaimInput{
			RunnerID: "runner-" + owner, Owner: owner,
			Device: protocol.PublicIdentity{Identity: "id-" + owner, Encryption: "enc-" + owner, EncryptionSig: "sig-" + owner},
			Routes: []store.Route{{SiteID: site, Owner: owner}}, Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 120_000,
		})
		if err != nil || len(g) != 1 || g[0].ID != id {
			t.Fatalf("claim %s: %+v %v", id, g, err)
		}
		return g[0]
	}
	seal := func(s *Store, id string) {
		t.Helper()
		if r, err := s.Seal(ctx, store.SealInput{SiteID: site, JobID: id, Envelope: envelope("payload", now()+600_000)}); err != nil || r.Refused != "" {
			t.Fatalf("seal %s: %+v %v", id, r, err)
		}
	}
	finish := func(s *Store, id, owner string) {
		t.Helper()
		enqueue(s, id, owner)
		g := claim(s, id, owner)
		seal(s, id)
		if r, err := s.TakePayload(ctx, store.HolderInput{JobID: id, RunnerID: "runner-" + owner, LeaseID: g.Lease.ID}); err != nil || r.Envelope == nil {
			t.Fatalf("take %s: %+v %v", id, r, err)
		}
		if r, err := s.Complete(ctx, store.CompleteInput{JobID: id, RunnerID: "runner-" + owner, LeaseID: g.Lease.ID,
			Envelope: envelope("result", now()+600_000), Disposition: store.DispositionOK}); err != nil || !r.Accepted {
			t.Fatalf("complete %s: %+v %v", id, r, err)
		}
	}
	ids := func(jobs []store.Job) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		slices.Sort(out)
		return out
	}
	same := func(what string, got, want []string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}

	// Under count 1: a result and an unsealed grant for each owner.
	before := open(1, 1)
	var done, waiting []string
	for _, o := range owners {
		finish(before, "done-"+o, o)
		enqueue(before, "wait-"+o, o)
		claim(before, "wait-"+o, o)
		done, waiting = append(done, "done-"+o), append(waiting, "wait-"+o)
	}

	after := open(DefaultUnsealedShards, DefaultFinishedShards)
	awaiting, err := after.Awaiting(ctx, site)
	if err != nil {
		t.Fatal(err)
	}
	same("awaiting under the raised count", ids(awaiting), slices.Clone(waiting))
	finished, err := after.Finished(ctx, site, 0)
	if err != nil {
		t.Fatal(err)
	}
	same("finished under the raised count", ids(finished), slices.Clone(done))
	page, err := after.ResultsPage(ctx, site, 50)
	if err != nil {
		t.Fatal(err)
	}
	same("a results page under the raised count", ids(page), slices.Clone(done))

	// New work lands on the new shards and is listed beside the old.
	for _, o := range owners {
		finish(after, "done2-"+o, o)
		enqueue(after, "wait2-"+o, o)
		claim(after, "wait2-"+o, o)
		done, waiting = append(done, "done2-"+o), append(waiting, "wait2-"+o)
	}
	awaiting, err = after.Awaiting(ctx, site)
	if err != nil {
		t.Fatal(err)
	}
	same("awaiting, old and new", ids(awaiting), slices.Clone(waiting))
	finished, err = after.Finished(ctx, site, 0)
	if err != nil {
		t.Fatal(err)
	}
	same("finished, old and new", ids(finished), slices.Clone(done))
	page, err = after.ResultsPage(ctx, site, 50)
	if err != nil {
		t.Fatal(err)
	}
	same("a results page, old and new", ids(page), slices.Clone(done))

	// The old grants, sealed under the new count, leave the awaiting list
	// at once; their members stay in the old sets until the sets' own
	// check, which the scheduled sweep runs once their windows are over.
	for _, o := range owners {
		seal(after, "wait-"+o)
	}
	awaiting, err = after.Awaiting(ctx, site)
	if err != nil {
		t.Fatal(err)
	}
	same("awaiting once the old grants are sealed", ids(awaiting), slices.DeleteFunc(slices.Clone(waiting), func(id string) bool { return id[:5] == "wait-" }))
	left := 0
	for _, o := range owners {
		av, err := after.getRaw(ctx, unsealedPK(site, 0), unsealedSK(o))
		if err != nil {
			t.Fatal(err)
		}
		left += len(getSS(av, "held"))
	}
	if left == 0 {
		t.Fatal("no old set holds a sealed grant's member: the check below checks nothing")
	}
	clk.Advance(2*time.Duration(store.AwaitingPayloadMs)*time.Millisecond + time.Second)
	if _, err := after.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		av, err := after.getRaw(ctx, unsealedPK(site, 0), unsealedSK(o))
		if err != nil {
			t.Fatal(err)
		}
		if held := getSS(av, "held"); len(held) > 0 {
			t.Errorf("%s's old set still holds %q after its check", o, held)
		}
	}
}

// A pending read's sweep and list come from one read of the site's sets
// (SweepAwaiting): a grant whose awaiting window is over is requeued, a
// live one is listed, as SweepLapsed then Awaiting would, and each set
// shard is queried once, strongly.
func TestSweepAwaitingReadsEachSetShardOnce(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	counter := &setQueries{API: localtest.DynamoClient(t)}
	const shards = 4
	s, err := New(Config{DB: counter, Table: newTable(t), Options: store.Options{Clock: clk}, DueShards: 4, UnsealedShards: shards})
	if err != nil {
		t.Fatal(err)
	}
	const site = "site"
	now := func() int64 { return clock.EpochMs(clk.Now()) }
	claim := func(id, owner string) {
		t.Helper()
		if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: site, Stub: protocol.JobStub{
			ID: id, Kind: "llm.generate", Owner: owner, Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: now() + 600_000,
		}}); err != nil {
			t.Fatal(err)
		}
		g, err := s.Claim(ctx, store.ClaimInput{RunnerID: "runner-" + owner, Owner: owner,
			Device: protocol.PublicIdentity{Identity: "id-" + owner, Encryption: "enc-" + owner, EncryptionSig: "sig-" + owner},
			Routes: []store.Route{{SiteID: site, Owner: owner}}, Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 120_000})
		if err != nil || len(g) != 1 || g[0].ID != id {
			t.Fatalf("claim %s: %+v %v", id, g, err)
		}
	}
	claim("lapsed", "alice")
	clk.Advance(time.Duration(store.AwaitingPayloadMs/2) * time.Millisecond)
	claim("live", "bob")
	clk.Advance(time.Duration(store.AwaitingPayloadMs/2+1) * time.Millisecond)

	counter.strong.Store(0)
	counter.weak.Store(0)
	jobs, swept, err := s.SweepAwaiting(ctx, site)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != "live" {
		t.Errorf("listed %+v, want the live grant alone", jobs)
	}
	if len(swept.Requeued) != 1 || swept.Requeued[0].ID != "lapsed" || len(swept.Removed) != 0 {
		t.Errorf("swept %+v, want the lapsed grant requeued", swept)
	}
	if strong, weak := counter.strong.Load(), counter.weak.Load(); strong != shards || weak != 0 {
		t.Errorf("%d strong and %d eventually consistent Queries of the sets, want %d strong: one a shard", strong, weak, shards)
	}
	j, ok, err := s.Job(ctx, site, "lapsed")
	if err != nil || !ok || j.State != store.StateQueued {
		t.Errorf("the lapsed job is %+v (%v, %v), want it queued", j, ok, err)
	}
}

// setQueries counts the Queries of unsealed sets, strong and not.
type setQueries struct {
	ddb.API
	strong, weak atomic.Int64
}

func (q *setQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if v, ok := in.ExpressionAttributeValues[":pk"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(v.Value, "U#") {
		if aws.ToBool(in.ConsistentRead) {
			q.strong.Add(1)
		} else {
			q.weak.Add(1)
		}
	}
	return q.API.Query(ctx, in, o...)
}
