package dynamo

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// TestAnEndedJobsItemCarriesItsRetentionAsTTL reads job items directly on
// DynamoDB Local: a live job's item has no TTL; once the job ends
// (completed, cancelled, expired) its item's TTL is the end of the
// configured retention, in epoch seconds, so DynamoDB deletes it and the
// sealed answer in it. (DynamoDB Local does not run TTL deletion; that the
// table has TTL on this attribute is TestTheTableIsSiteTemplateYAMLs's.)
func TestAnEndedJobsItemCarriesItsRetentionAsTTL(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	table := newTable(t)
	const retention = 3 * 24 * 60 * 60_000
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Clock: clk, RetentionMs: retention})
	if err != nil {
		t.Fatal(err)
	}
	db := localtest.DynamoClient(t)
	ttlOf := func(id string) (int64, bool) {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key(jobPK(id), skJob), ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item == nil {
			t.Fatalf("job item %s: %v", id, err)
		}
		n, ok := out.Item[ttlAttribute].(*types.AttributeValueMemberN)
		if !ok {
			return 0, false
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v, true
	}
	create := func(id string, ttlMs int64) {
		t.Helper()
		env := protocol.SealedEnvelope{Ciphertext: "c-" + id, RecipientKeyID: "site", SenderKeyID: "site",
			Direction: protocol.DirectionPayload, DeadlineAt: clk.Now().UnixMilli() + protocol.EnvelopeMaxAgeMs}
		if _, err := s.Create(ctx, sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: env, SizeClass: "small",
			Owner: "alice", TTLMs: ttlMs}); err != nil {
			t.Fatal(err)
		}
		if ttl, set := ttlOf(id); set {
			t.Fatalf("%s: a live job's item has TTL %d", id, ttl)
		}
	}

	create("done", 0)
	caps := []protocol.Capability{{Kind: protocol.KindGenerate, Service: "primary", BackendID: "ollama",
		BackendClass: protocol.BackendClassOf["ollama"], Model: "m", OfferScope: protocol.AudiencePrivate}}
	jobs, err := s.Claim(ctx, sitestore.ClaimInput{RunnerID: "r1", RunnerOwner: "alice", Capabilities: caps, Max: 1, LeaseMs: 10_000})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if ttl, set := ttlOf("done"); set {
		t.Fatalf("a held job's item has TTL %d", ttl)
	}
	clk.Advance(1500 * time.Millisecond)
	if res, err := s.Complete(ctx, sitestore.CompleteInput{JobID: "done", RunnerID: "r1",
		Holder: sitestore.HolderByLease(jobs[0].Lease.ID, "r1"), Outcome: protocol.OKOutcome("x"),
		Provenance: sitestore.Provenance{Audience: jobs[0].Audience, RunnerID: "r1", RunnerOwner: "alice", BackendClass: "http", Model: "m"}}); err != nil || !res.Accepted {
		t.Fatalf("complete: %+v %v", res, err)
	}
	create("cancelled", 0)
	if _, _, err := s.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	create("expired", 1000)
	clk.Advance(time.Second)
	if _, err := s.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"done", "cancelled", "expired"} {
		j, _, err := s.Get(ctx, id)
		if err != nil || !j.Ended() {
			t.Fatalf("%s: %+v %v, want an ended job", id, j.State, err)
		}
		want := (j.UpdatedAt + retention + 999) / 1000
		if ttl, set := ttlOf(id); !set || ttl != want {
			t.Errorf("%s ended at %d: TTL %d (set %v), want %d (the retention's end, in seconds)", id, j.UpdatedAt, ttl, set, want)
		}
	}
}
