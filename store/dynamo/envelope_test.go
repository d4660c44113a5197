package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// maxEnvelope is the protocol's ceiling, MAX_ENVELOPE_BYTES: the JSON of an
// envelope may be this long.
const maxEnvelope = 6 * 1024 * 1024

// bigEnvelope is an envelope whose JSON is exactly size bytes.
func bigEnvelope(t *testing.T, size int, direction string) protocol.SealedEnvelope {
	t.Helper()
	e := protocol.SealedEnvelope{RecipientKeyID: "r", SenderKeyID: "s", Direction: direction, DeadlineAt: 4_102_444_800_000}
	overhead := len(mustJSON(t, e))
	e.Ciphertext = strings.Repeat("A", size-overhead)
	if got := len(mustJSON(t, e)); got != size {
		t.Fatalf("envelope is %d bytes, want %d", got, size)
	}
	return e
}

func bucketKeys(t *testing.T, client *s3.Client, bucket string) []string {
	t.Helper()
	out, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, *o.Key)
	}
	return keys
}

// TestEnvelopesUpToTheLimitRoundTripThroughS3 seals and completes a
// job with 6 MiB envelopes (the protocol's limit; a DynamoDB item holds 400
// KB), against moto's S3: the job item holds pointers, the daemon and the
// site get the envelopes back byte for byte, and the objects go with the
// job when the sweep ends it. A small envelope stays inline.
func TestEnvelopesUpToTheLimitRoundTripThroughS3(t *testing.T) {
	ctx := context.Background()
	objs, client, bucket := newBucket(t)
	clk := clock.NewManual(storetest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Objects: objs, Options: store.Options{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := clock.EpochMs(clk.Now()) + 60_000
	enqueue := func(id string) {
		st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "large", DeadlineAt: deadline}
		if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("big")
	enqueue("small")
	claim := func() store.Claimed {
		g, err := s.Claim(ctx, faultClaim("r1"))
		if err != nil || len(g) != 1 {
			t.Fatalf("claim: %v %v", g, err)
		}
		return g[0]
	}

	g := claim()
	payload := bigEnvelope(t, maxEnvelope, "payload")
	if res, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: g.ID, Envelope: payload}); err != nil || res.State != store.StateReady {
		t.Fatalf("seal: %+v %v", res, err)
	}
	taken, err := s.TakePayload(ctx, store.HolderInput{JobID: g.ID, RunnerID: "r1", LeaseID: g.Lease.ID})
	if err != nil || taken.Envelope == nil || *taken.Envelope != payload {
		t.Fatalf("take: refused=%q err=%v same=%v", taken.Refused, err, taken.Envelope != nil && *taken.Envelope == payload)
	}
	result := bigEnvelope(t, maxEnvelope, "result")
	if res, err := s.Complete(ctx, store.CompleteInput{JobID: g.ID, RunnerID: "r1", LeaseID: g.Lease.ID, Envelope: result, Disposition: store.DispositionOK}); err != nil || !res.Accepted {
		t.Fatalf("complete: %+v %v", res, err)
	}
	finished, err := s.Finished(ctx, "site", 0)
	if err != nil || len(finished) != 1 || *finished[0].Result != result {
		t.Fatalf("finished: %d jobs, err %v", len(finished), err)
	}
	raw, ok, err := s.readJob(ctx, jobPK("site", g.ID))
	if err != nil || !ok || raw.PayloadS3 == "" || raw.ResultS3 == "" || raw.Payload != "" || raw.Result != "" {
		t.Fatalf("the item should hold two S3 pointers and no inline envelope: %+v %v", raw != nil, err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 2 {
		t.Fatalf("bucket holds %v, want the payload and the result", got)
	}

	// A small payload goes to an item of its own, not to S3.
	g2 := claim()
	small := protocol.SealedEnvelope{Ciphertext: "tiny", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1}
	if _, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: g2.ID, Envelope: small}); err != nil {
		t.Fatal(err)
	}
	if raw, _, _ := s.readJob(ctx, jobPK("site", g2.ID)); raw.PayloadItem == "" || raw.Payload != "" || raw.PayloadS3 != "" {
		t.Fatalf("a small payload is not in an item of its own")
	}
	if got := bucketKeys(t, client, bucket); len(got) != 2 {
		t.Fatalf("bucket holds %v after an inline seal", got)
	}

	// The deadline takes both jobs; only the unfinished one is reported
	// removed. The finished one expires, its objects kept for the grace a
	// collect may still list its result in, and deleted by the sweep after
	// it.
	clk.Advance(61 * time.Second)
	swept, err := s.Sweep(ctx)
	if err != nil || len(swept.Removed) != 1 || swept.Removed[0].ID != g2.ID {
		t.Fatalf("sweep: %+v %v", swept, err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 2 {
		t.Fatalf("bucket holds %v, want the finished job's two objects for the result grace", got)
	}
	if _, ok, err := s.Job(ctx, "site", "big"); err != nil || ok {
		t.Fatalf("the finished job outlived its deadline: %v %v", ok, err)
	}
	clk.Advance(time.Duration(store.ResultGraceMs) * time.Millisecond)
	if swept, err := s.Sweep(ctx); err != nil || len(swept.Removed) != 0 {
		t.Fatalf("sweep after the grace: %+v %v", swept, err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 0 {
		t.Fatalf("bucket holds %v after the finished job's end", got)
	}
}

// sealedOffBox is a store whose job "a", claimed by r1 under lease, holds a
// payload too large to inline: the bucket holds its one object.
func sealedOffBox(t *testing.T, clk clock.Clock) (s *Store, lease string, client *s3.Client, bucket string) {
	t.Helper()
	ctx := context.Background()
	objs, client, bucket := newBucket(t)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Objects: objs, Options: store.Options{Clock: clk}, InlineEnvelopeBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	st := protocol.JobStub{ID: "a", Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "large", DeadlineAt: 4_102_444_800_000}
	if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: "a", SiteID: "site", Stub: st}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Claim(ctx, faultClaim("r1"))
	if err != nil || len(g) != 1 {
		t.Fatalf("claim: %v %v", g, err)
	}
	if _, err := s.Seal(ctx, store.SealInput{SiteID: "site", JobID: "a", Envelope: bigEnvelope(t, 4096, "payload")}); err != nil {
		t.Fatal(err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 1 {
		t.Fatalf("bucket holds %v, want the payload", got)
	}
	return s, g[0].Lease.ID, client, bucket
}

// TestARequeueDropsTheSealedPayloadObject: a payload sealed to one device
// is useless to the next, so a requeue deletes its object.
func TestARequeueDropsTheSealedPayloadObject(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	s, _, client, bucket := sealedOffBox(t, clk)
	// Too late: the lease ran out and the sweep requeues it.
	clk.Advance(61 * time.Second)
	if res, err := s.Sweep(ctx); err != nil || len(res.Requeued) != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 0 {
		t.Fatalf("bucket still holds %v after the requeue", got)
	}
}

// TestAnObjectDroppedAfterAReadSendsTheReaderBack: a reader that
// read the job just before a requeue dropped its payload object finds the
// object gone; that is errEnvelopeGone, which makes every caller read the
// job again, never a failed request.
func TestAnObjectDroppedAfterAReadSendsTheReaderBack(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	s, _, client, bucket := sealedOffBox(t, clk)
	stale, ok, err := s.readJob(ctx, jobPK("site", "a"))
	if err != nil || !ok || stale.PayloadS3 == "" {
		t.Fatalf("read the sealed job: ok=%v err=%v", ok, err)
	}
	clk.Advance(61 * time.Second)
	if res, err := s.Sweep(ctx); err != nil || len(res.Requeued) != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if got := bucketKeys(t, client, bucket); len(got) != 0 {
		t.Fatalf("bucket still holds %v after the requeue", got)
	}
	if err := s.loadEnvelopes(ctx, stale); !errors.Is(err, errEnvelopeGone) {
		t.Fatalf("load of the stale read: %v, want errEnvelopeGone", err)
	}
	if j, ok, err := s.Job(ctx, "site", "a"); err != nil || !ok || j.State != store.StateQueued {
		t.Fatalf("job after the requeue: %+v ok=%v err=%v", j, ok, err)
	}
}

// TestAMissingEnvelopeObjectIsAnError: an object gone from under its job
// (deleted by hand, or by the bucket's lifecycle rule) makes a read of the
// job and the daemon's fetch of its payload an error that says so, as with
// the SDK's client before: never a job without its envelope, never a
// refusal that would send the daemon away.
func TestAMissingEnvelopeObjectIsAnError(t *testing.T) {
	ctx := context.Background()
	s, lease, client, bucket := sealedOffBox(t, clock.NewManual(storetest.Start))
	keys := bucketKeys(t, client, bucket)
	if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &keys[0]}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Job(ctx, "site", "a"); !errors.Is(err, objects.ErrNotFound) || ok {
		t.Fatalf("job with its object gone: ok=%v err=%v, want the object's absence", ok, err)
	}
	taken, err := s.TakePayload(ctx, store.HolderInput{JobID: "a", RunnerID: "r1", LeaseID: lease})
	if !errors.Is(err, objects.ErrNotFound) || taken.Envelope != nil || taken.Refused != "" {
		t.Fatalf("fetch with the object gone: %+v %v, want the object's absence", taken, err)
	}
}

// TestAnEnvelopeObjectLongerThanAnyEnvelopeIsNotRead: what a read of an
// object takes is bounded by the longest envelope the store writes, not by
// what the bucket holds.
func TestAnEnvelopeObjectLongerThanAnyEnvelopeIsNotRead(t *testing.T) {
	ctx := context.Background()
	objs, _, _ := newBucket(t)
	s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	if err := objs.Put(ctx, "long", make([]byte, maxEnvelopeObject+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.getEnvelope(ctx, "long"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("read an object past the bound: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := jsonMarshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
