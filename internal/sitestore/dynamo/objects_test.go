package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// failingDeletes is the bucket with every delete refused: a stand-in for a
// missing s3:DeleteObject grant, which moto cannot be told to refuse.
type failingDeletes struct{ Objects }

func (failingDeletes) Delete(context.Context, string) error { return errors.New("access denied") }

func bigEnvelope(id string, now int64) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{Ciphertext: strings.Repeat("c", MaxEnvelopeItemBytes+1), RecipientKeyID: "site",
		SenderKeyID: "site", Direction: protocol.DirectionPayload, DeadlineAt: now + protocol.EnvelopeMaxAgeMs}
}

// newBucket is a fresh bucket on moto, with the client and the name that
// list it.
func newBucket(t *testing.T) (*objects.Bucket, *s3.Client, string) {
	t.Helper()
	bucket := strings.ToLower(localtest.UniqueName("site-env"))
	s3c := localtest.S3Client(t)
	if _, err := s3c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	return objects.New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", bucket, true), s3c, bucket
}

// TestAnEnvelopeOverTheItemLimitIsOffloadedOrRefused: with a bucket (moto)
// an envelope over MaxEnvelopeItemBytes is stored as an object, read back
// whole by Get, and the object is deleted when the job ends (cancelled
// here); a delete that fails is counted and reported. Without a bucket the
// same envelope is refused ErrTooLarge and nothing is stored.
func TestAnEnvelopeOverTheItemLimitIsOffloadedOrRefused(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	objs, s3c, bucket := newBucket(t)
	table := newTable(t)
	var reported []error
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Clock: clk, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	inBucket := func() int {
		t.Helper()
		out, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Contents)
	}
	env := bigEnvelope("big", clk.Now().UnixMilli())
	if _, err := s.Create(ctx, sitestore.CreateInput{ID: "big", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "large", Owner: "alice"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if n := inBucket(); n != 1 {
		t.Fatalf("%d objects in the bucket after create, want 1", n)
	}
	if again, err := s.Create(ctx, sitestore.CreateInput{ID: "big", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "large", Owner: "alice"}); err != nil || again.Envelope != env {
		t.Fatalf("an idempotent create: %v", err)
	}
	if n := inBucket(); n != 1 {
		t.Fatalf("%d objects in the bucket after a repeated create, want 1", n)
	}
	j, found, err := s.Get(ctx, "big")
	if err != nil || !found || j.Envelope != env {
		t.Fatalf("get: found=%v err=%v, envelope whole=%v", found, err, j.Envelope == env)
	}
	if _, _, err := s.Cancel(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if n := inBucket(); n != 0 {
		t.Fatalf("%d objects in the bucket after the job ended, want 0", n)
	}

	failing, err := New(Config{DB: localtest.DynamoClient(t), Table: table, Clock: clk, Objects: failingDeletes{objs},
		OnObjectDeleteFailed: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failing.Create(ctx, sitestore.CreateInput{ID: "kept", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "large", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := failing.Cancel(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	if failing.ObjectDeleteFailures() != 1 || len(reported) != 1 {
		t.Fatalf("a failed delete: counted %d, reported %v", failing.ObjectDeleteFailures(), reported)
	}

	bare := replica(t, table, clk, nil)
	if _, err := bare.Create(ctx, sitestore.CreateInput{ID: "refused", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "large", Owner: "alice"}); !errors.Is(err, sitestore.ErrTooLarge) {
		t.Fatalf("a store without a bucket: %v, want ErrTooLarge", err)
	}
	if _, found, err := bare.Get(ctx, "refused"); err != nil || found {
		t.Fatalf("a refused create stored the job: found=%v err=%v", found, err)
	}
}

// TestAnEndedJobIsReadWithoutItsDeletedObject holds the moment between a
// job's ending write and the delete of its envelope: the envelope item
// still names an object already gone from the bucket. Get answers the
// ended job without an envelope (as the memory store does), never an
// error; an app polling a job's result would otherwise see a 500.
func TestAnEndedJobIsReadWithoutItsDeletedObject(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	objs, _, _ := newBucket(t)
	db := localtest.DynamoClient(t)
	table := newTable(t)
	s, err := New(Config{DB: db, Table: table, Clock: clk, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	env := bigEnvelope("gap", clk.Now().UnixMilli())
	if _, err := s.Create(ctx, sitestore.CreateInput{ID: "gap", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "large", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	envKey := key(jobPK("gap"), skEnv)
	before, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: envKey, ConsistentRead: aws.Bool(true)})
	if err != nil || before.Item == nil || objectOf(before.Item) == "" {
		t.Fatalf("the envelope item names no object: %v", err)
	}
	if _, _, err := s.Cancel(ctx, "gap"); err != nil {
		t.Fatal(err)
	}
	// The ending write has committed and the object is gone; put the item
	// back as it was before its own delete.
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: before.Item}); err != nil {
		t.Fatal(err)
	}
	j, found, err := s.Get(ctx, "gap")
	if err != nil || !found {
		t.Fatalf("get of an ended job whose object is gone: found=%v err=%v", found, err)
	}
	if j.State != sitestore.StateCanceled || j.Envelope != (protocol.SealedEnvelope{}) {
		t.Fatalf("got state %s with an envelope=%v, want cancelled without one", j.State, j.Envelope != (protocol.SealedEnvelope{}))
	}
}
