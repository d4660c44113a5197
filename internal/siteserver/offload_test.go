package siteserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// sizeBackend answers every prompt with its length: a short answer to a
// long prompt.
type sizeBackend struct{ daemon.EchoBackend }

func (sizeBackend) Run(_ context.Context, prompt string) (daemon.Answer, error) {
	return daemon.Answer{Text: fmt.Sprintf("read %d bytes", len(prompt)), Stop: "end"}, nil
}

// TestATwoMiBPayloadRunsThroughTheSiteStore enqueues a 2 MiB payload on a
// direct-lane site over DynamoDB Local with a bucket on moto: its at-rest
// envelope is offloaded (the item names an object, which is in the bucket),
// a Go daemon fetches and runs it, the answer reads back through the app
// API, and once the job has ended its object is gone from the bucket.
func TestATwoMiBPayloadRunsThroughTheSiteStore(t *testing.T) {
	ctx := context.Background()
	bucket := strings.ToLower(localtest.UniqueName("site-env"))
	s3c := localtest.S3Client(t)
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("site")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	var deleteFailures []error
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table,
		Objects:              objects.New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", bucket, true),
		OnObjectDeleteFailed: func(err error) { deleteFailures = append(deleteFailures, err) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := startDirectSite(t, st, sizeBackend{})

	prompt := strings.Repeat("€", (2<<20)/len("€")+1) // 2 MiB of UTF-8
	payload, _ := json.Marshal(map[string]string{"prompt": prompt})
	j, err := srv.Enqueue(ctx, siteserver.EnqueueInput{Kind: protocol.KindGenerate, Payload: payload, Owner: "alice"})
	if err != nil {
		t.Fatalf("enqueue of a 2 MiB payload: %v", err)
	}
	if n := len(j.Envelope.Ciphertext); n <= sitedynamo.MaxEnvelopeItemBytes {
		t.Fatalf("the envelope is %d bytes, not over the inline limit: the test proves nothing", n)
	}
	env, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]dynamotypes.AttributeValue{"pk": &dynamotypes.AttributeValueMemberS{Value: "JOB#" + j.ID},
			"sk": &dynamotypes.AttributeValueMemberS{Value: "ENV"}}})
	if err != nil || env.Item == nil {
		t.Fatalf("envelope item: %v", err)
	}
	obj, ok := env.Item["obj"].(*dynamotypes.AttributeValueMemberS)
	if !ok || obj.Value == "" {
		t.Fatal("the envelope item names no object")
	}
	if _, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &obj.Value}); err != nil {
		t.Fatalf("the offloaded object is not in the bucket: %v", err)
	}

	r := waitEnded(t, srv, j.ID)
	if want := fmt.Sprintf("read %d bytes", len(prompt)); r.State != sitestore.StateOK || r.Outcome == nil || r.Outcome.TextOrEmpty() != want {
		t.Fatalf("the job ended %+v, want ok %q", r, want)
	}
	// The call that ended the job deletes the object right after its end
	// write, and the app's read above can land between the two: wait for
	// that call, boundedly, rather than race it.
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err = s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &obj.Value})
		if _, gone := errors.AsType[*s3types.NotFound](err); gone {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("the object is still in the bucket 10 s after the job ended (head: %v); delete failures %v", err, deleteFailures)
		}
	}
}

// TestATwoMiBPayloadRunsOnTheCloudLane is the same through a real relay: a
// cloud-lane site over DynamoDB Local with a bucket on moto takes a 2 MiB
// payload (its at-rest envelope offloaded), seals it to the relay's device,
// collects the answer, and leaves no object once the job has ended.
func TestATwoMiBPayloadRunsOnTheCloudLane(t *testing.T) {
	ctx := context.Background()
	bucket := strings.ToLower(localtest.UniqueName("site-env"))
	s3c := localtest.S3Client(t)
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	w := newCloudWorldOn(t, func(clk *clock.Manual) sitestore.Store {
		db := localtest.DynamoClient(t)
		table := localtest.UniqueName("site")
		if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
			t.Fatal(err)
		}
		st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table, Clock: clk,
			Objects: objects.New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", bucket, true)})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
	d, err := daemon.New(daemon.Config{RelayURL: w.url, Keys: w.device.Keys, Clock: w.clock,
		Pairing: daemon.Pairing{RunnerID: w.device.RunnerID, Owner: w.device.Owner},
		Backend: sizeBackend{}, Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	w.daemon = d
	s := w.start(nil)
	prompt := strings.Repeat("€", (2<<20)/len("€")+1)
	w.enqueue(s, "big", prompt)
	objectsNow := func() int {
		t.Helper()
		out, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Contents)
	}
	if n := objectsNow(); n != 1 {
		t.Fatalf("%d objects after the enqueue, want the offloaded envelope", n)
	}
	w.settle(s, w.ended("big"))
	if want := fmt.Sprintf("read %d bytes", len(prompt)); w.answer("big") != want {
		t.Fatalf("the answer read back %q, want %q", w.answer("big"), want)
	}
	if n := objectsNow(); n != 0 {
		t.Fatalf("%d objects left after the job ended", n)
	}
}
