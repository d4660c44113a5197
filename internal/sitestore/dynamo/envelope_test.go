package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// TestAnEndedJobsEnvelopeItemIsGoneFromTheTable reads the table directly
// (a consistent GetItem of each job's ENV item) after each way a job ends
// on DynamoDB Local: completed, cancelled while queued, expired. The item
// is there while the job is live, and gone once the write that ended the
// job committed.
func TestAnEndedJobsEnvelopeItemIsGoneFromTheTable(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	table := newTable(t)
	s := replica(t, table, clk, nil)
	db := localtest.DynamoClient(t)
	envItemThere := func(id string) bool {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key(jobPK(id), skEnv), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item != nil
	}
	create := func(id string, ttlMs int64) {
		t.Helper()
		env := protocol.SealedEnvelope{Ciphertext: "secret-" + id, RecipientKeyID: "site", SenderKeyID: "site",
			Direction: protocol.DirectionPayload, DeadlineAt: clk.Now().UnixMilli() + protocol.EnvelopeMaxAgeMs}
		if _, err := s.Create(ctx, sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: env, SizeClass: "small",
			Owner: "alice", TTLMs: ttlMs}); err != nil {
			t.Fatal(err)
		}
		if !envItemThere(id) {
			t.Fatalf("%s: no envelope item after create: the check proves nothing", id)
		}
	}

	create("done", 0)
	caps := []protocol.Capability{{Kind: protocol.KindGenerate, Service: "primary", BackendID: "ollama",
		BackendClass: protocol.BackendClassOf["ollama"], Model: "m", OfferScope: protocol.AudiencePrivate}}
	jobs, err := s.Claim(ctx, sitestore.ClaimInput{RunnerID: "r1", RunnerOwner: "alice", Capabilities: caps, Max: 1, LeaseMs: 10_000})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if !envItemThere("done") {
		t.Fatal("a claim dropped the envelope of a live job")
	}
	res, err := s.Complete(ctx, sitestore.CompleteInput{JobID: "done", RunnerID: "r1",
		Holder: sitestore.HolderByLease(jobs[0].Lease.ID, "r1"), Outcome: protocol.OKOutcome("x"),
		Provenance: sitestore.Provenance{Audience: jobs[0].Audience, RunnerID: "r1", RunnerOwner: "alice", BackendClass: "http", Model: "m"}})
	if err != nil || !res.Accepted {
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
		if envItemThere(id) {
			t.Errorf("%s ended and its envelope item is still in the table", id)
		}
		if j, found, err := s.Get(ctx, id); err != nil || !found || !j.Ended() {
			t.Errorf("%s: %+v %v %v, want an ended job", id, j.State, found, err)
		}
	}
}
