package lambdafn

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/storetest"
)

// offloading is a stack opened from the environment as a Lambda container
// opens it, over a fresh table and bucket, with job "big" claimed by r1.
type offloading struct {
	st     *Stack
	sdk    *s3.Client
	bucket string
	grant  protocol.ClaimedStub
	stub   protocol.JobStub
}

func openOffloading(t *testing.T, metrics io.Writer) offloading {
	t.Helper()
	ctx := context.Background()
	localtest.LambdaEnv(t, map[string]string{
		"dynamodb": localtest.DynamoEndpoint(t),
		"s3":       strings.Replace(localtest.MotoEndpoint(t), "127.0.0.1", "localhost", 1),
	})

	table, bucket := localtest.UniqueName("offload"), localtest.UniqueName("offload")
	if err := dynamo.CreateTable(ctx, localtest.DynamoClient(t), table); err != nil {
		t.Fatal(err)
	}
	sdk := localtest.S3Client(t)
	if _, err := sdk.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": table, "BUCKET_NAME": bucket, "S3_PATH_STYLE": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(storetest.Start)
	st, err := Open(env, Options{Clock: clk, Logger: slog.New(slog.DiscardHandler), MetricsOut: metrics})
	if err != nil {
		t.Fatal(err)
	}

	stub := protocol.JobStub{ID: "big", Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "large",
		DeadlineAt: clock.EpochMs(clk.Now()) + 60_000}
	if _, err := st.Store.Enqueue(ctx, store.EnqueueInput{ID: "big", SiteID: "site", Stub: stub}); err != nil {
		t.Fatal(err)
	}
	g, err := st.Store.Claim(ctx, store.ClaimInput{
		RunnerID: "r1", Owner: "alice", Device: protocol.PublicIdentity{Identity: "id-r1"},
		Routes: []store.Route{{SiteID: "site", Owner: "alice"}}, Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 60_000,
	})
	if err != nil || len(g) != 1 {
		t.Fatalf("claim: %v %v", g, err)
	}
	return offloading{st: st, sdk: sdk, bucket: bucket, grant: g[0].ClaimedStub, stub: stub}
}

// A stack opened from the environment as a Lambda container opens it
// (BUCKET_NAME, S3_PATH_STYLE, AWS_ENDPOINT_URL_S3) offloads an envelope
// too large to inline to the bucket and hands it back byte for byte,
// through internal/platform/objects. The endpoint is moto's by host name, not by
// address, so only S3_PATH_STYLE keeps the bucket out of the host name (a
// bucket host name under localhost does not resolve).
func TestOpenOffloadsALargeEnvelopeToTheBucket(t *testing.T) {
	ctx := context.Background()
	o := openOffloading(t, io.Discard)
	st, sdk, bucket, g, stub := o.st, o.sdk, o.bucket, o.grant, o.stub
	payload := protocol.SealedEnvelope{Ciphertext: strings.Repeat("A", 2*dynamo.DefaultInlineEnvelopeBytes),
		RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: stub.DeadlineAt}
	if _, err := st.Store.Seal(ctx, store.SealInput{SiteID: "site", JobID: "big", Envelope: payload}); err != nil {
		t.Fatal(err)
	}
	listed, err := sdk.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(listed.Contents) != 1 {
		t.Fatalf("the bucket should hold the payload: %v %v", listed, err)
	}
	taken, err := st.Store.TakePayload(ctx, store.HolderInput{JobID: "big", RunnerID: "r1", LeaseID: g.Lease.ID})
	if err != nil || taken.Envelope == nil || *taken.Envelope != payload {
		t.Fatalf("take: refused=%q err=%v", taken.Refused, err)
	}
}

// A failed delete of an envelope object reaches the metrics: the payload
// object of a released grant is deleted with the bucket gone (NoSuchBucket,
// as a missing grant or a bucket policy would refuse it), and the stack
// writes one EnvelopeDeleteFailures record, on the function's dimension,
// for the alarm to count.
func TestAFailedObjectDeleteIsCounted(t *testing.T) {
	ctx := context.Background()
	var metrics bytes.Buffer
	o := openOffloading(t, &metrics)
	payload := protocol.SealedEnvelope{Ciphertext: strings.Repeat("A", 2*dynamo.DefaultInlineEnvelopeBytes),
		RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: o.stub.DeadlineAt}
	if _, err := o.st.Store.Seal(ctx, store.SealInput{SiteID: "site", JobID: "big", Envelope: payload}); err != nil {
		t.Fatal(err)
	}
	listed, err := o.sdk.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(o.bucket)})
	if err != nil || len(listed.Contents) != 1 {
		t.Fatalf("the bucket should hold the payload: %v %v", listed, err)
	}
	if _, err := o.sdk.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(o.bucket), Key: listed.Contents[0].Key}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.sdk.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(o.bucket)}); err != nil {
		t.Fatal(err)
	}
	metrics.Reset()
	released, err := o.st.Store.ReleaseLeases(ctx, store.ReleaseInput{RunnerID: "r1",
		Leases: []protocol.GrantRef{{JobID: "big", LeaseID: o.grant.Lease.ID}}})
	if err != nil || len(released) != 1 {
		t.Fatalf("release: %v %v", released, err)
	}
	var failures []emfRecord
	for _, r := range readEMF(t, &metrics) {
		checkEMF(t, r)
		if _, ok := r.Values[MetricEnvelopeDeleteFailures]; ok {
			failures = append(failures, r)
		}
	}
	if len(failures) != 1 || failures[0].Values[MetricEnvelopeDeleteFailures] != 1.0 || failures[0].Values["Function"] == nil {
		t.Fatalf("the failed delete wrote %d EnvelopeDeleteFailures records (%v), want one counting 1", len(failures), metrics.String())
	}
}
