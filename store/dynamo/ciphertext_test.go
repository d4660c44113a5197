package dynamo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// flakyObjects is the bucket with deletes that fail while failing is set:
// the S3 error or throttle a sweep must survive. moto cannot be told to
// fail a request, so this one behaviour is injected; every other call is
// moto's.
type flakyObjects struct {
	Objects
	failing atomic.Bool
	// refused counts the deletes refused while failing.
	refused atomic.Int64
}

func (f *flakyObjects) Delete(ctx context.Context, key string) error {
	if f.failing.Load() {
		f.refused.Add(1)
		return errors.New("injected: S3 SlowDown")
	}
	return f.Objects.Delete(ctx, key)
}

// cipherEnv is a store over DynamoDB Local and moto's S3 with a small inline
// limit, so a 4 KiB envelope goes to S3 and a small one to an item.
type cipherEnv struct {
	t      *testing.T
	ctx    context.Context
	s      *Store
	db     *dynamodb.Client
	table  string
	s3     *s3.Client
	bucket string
	objs   *flakyObjects
	// deleteFailures counts what the store reported to
	// Config.OnObjectDeleteFailed.
	deleteFailures atomic.Int64
	clock          *clock.Manual
	// secrets are the ciphertexts the test sealed, as text and as bytes.
	secrets [][]byte
}

func newCipherEnv(t *testing.T) *cipherEnv {
	t.Helper()
	objs, client, bucket := newBucket(t)
	e := &cipherEnv{
		t: t, ctx: context.Background(), db: localtest.DynamoClient(t), table: newTable(t),
		s3: client, bucket: bucket, objs: &flakyObjects{Objects: objs},
		clock: clock.NewManual(storetest.Start),
	}
	s, err := New(Config{DB: e.db, Table: e.table, Objects: e.objs, Options: store.Options{Clock: e.clock}, InlineEnvelopeBytes: 1024,
		OnObjectDeleteFailed: func(err error) {
			if !strings.Contains(err.Error(), "injected: S3 SlowDown") {
				t.Errorf("a delete failure reported without its cause: %v", err)
			}
			e.deleteFailures.Add(1)
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	return e
}

func (e *cipherEnv) now() int64 { return clock.EpochMs(e.clock.Now()) }

// envelope is a sealed envelope of about size bytes of random ciphertext,
// remembered as a secret that must not outlive its job.
func (e *cipherEnv) envelope(direction string, size int) protocol.SealedEnvelope {
	raw := make([]byte, size)
	rand.Read(raw)
	text := base64.RawURLEncoding.EncodeToString(raw)
	e.secrets = append(e.secrets, []byte(text), raw)
	return protocol.SealedEnvelope{Ciphertext: text, RecipientKeyID: "r", SenderKeyID: "s", Direction: direction, DeadlineAt: 4_102_444_800_000}
}

// claimed enqueues id with the deadline given and claims it for r1.
func (e *cipherEnv) claimed(id string, deadline int64) store.Claimed {
	e.t.Helper()
	st := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: deadline}
	if _, err := e.s.Enqueue(e.ctx, store.EnqueueInput{ID: id, SiteID: "site", Stub: st}); err != nil {
		e.t.Fatal(err)
	}
	g, err := e.s.Claim(e.ctx, faultClaim("r1"))
	if err != nil || len(g) != 1 || g[0].ID != id {
		e.t.Fatalf("claim %s: %v %v", id, g, err)
	}
	return g[0]
}

func (e *cipherEnv) seal(g store.Claimed, size int) {
	e.t.Helper()
	res, err := e.s.Seal(e.ctx, store.SealInput{SiteID: "site", JobID: g.ID, Envelope: e.envelope("payload", size)})
	if err != nil || res.State != store.StateReady {
		e.t.Fatalf("seal %s: %+v %v", g.ID, res, err)
	}
	taken, err := e.s.TakePayload(e.ctx, store.HolderInput{JobID: g.ID, RunnerID: "r1", LeaseID: g.Lease.ID})
	if err != nil || taken.Envelope == nil {
		e.t.Fatalf("fetch %s: %+v %v", g.ID, taken, err)
	}
}

func (e *cipherEnv) complete(g store.Claimed, size int, d store.Disposition) {
	e.t.Helper()
	res, err := e.s.Complete(e.ctx, store.CompleteInput{JobID: g.ID, RunnerID: "r1", LeaseID: g.Lease.ID, Envelope: e.envelope("result", size), Disposition: d})
	if err != nil || !res.Accepted {
		e.t.Fatalf("complete %s: %+v %v", g.ID, res, err)
	}
}

func (e *cipherEnv) cancel(g store.Claimed) {
	e.t.Helper()
	if ok, err := e.s.Cancel(e.ctx, "site", g.ID); err != nil || !ok {
		e.t.Fatalf("cancel %s: %v %v", g.ID, ok, err)
	}
}

// stream appends three frames of sealed text to g's live stream.
func (e *cipherEnv) stream(g store.Claimed) {
	e.t.Helper()
	for n := int64(0); n < 3; n++ {
		ct := e.envelope("result", 200).Ciphertext
		res, err := e.s.AppendFrame(e.ctx, store.AppendFrameInput{JobID: g.ID, RunnerID: "r1", LeaseID: g.Lease.ID,
			Frame: store.StreamFrame{N: n, From: n * 5, Seq: n*5 + 5, Kind: store.FrameChunk, CT: ct}})
		if err != nil || res.Refused != "" {
			e.t.Fatalf("append frame %d: %+v %v", n, res, err)
		}
	}
}

// sweep sweeps at the clock's time and answers the ids reported removed.
func (e *cipherEnv) sweep() []string {
	e.t.Helper()
	res, err := e.s.Sweep(e.ctx)
	if err != nil {
		e.t.Fatalf("sweep: %v", err)
	}
	var ids []string
	for _, j := range res.Removed {
		ids = append(ids, j.ID)
	}
	return ids
}

// items is every item of the table, read straight from DynamoDB.
func (e *cipherEnv) items() []map[string]types.AttributeValue {
	e.t.Helper()
	var all []map[string]types.AttributeValue
	in := &dynamodb.ScanInput{TableName: &e.table, ConsistentRead: aws.Bool(true)}
	for {
		out, err := e.db.Scan(e.ctx, in)
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return all
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// holds reports whether an attribute value contains one of the secrets.
func (e *cipherEnv) holds(v types.AttributeValue) bool {
	has := func(b []byte) bool {
		for _, s := range e.secrets {
			// A prefix is enough: an item holds the ciphertext whole.
			if bytes.Contains(b, s[:32]) {
				return true
			}
		}
		return false
	}
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return has([]byte(v.Value))
	case *types.AttributeValueMemberB:
		return has(v.Value)
	case *types.AttributeValueMemberSS:
		return has([]byte(strings.Join(v.Value, "\x00")))
	case *types.AttributeValueMemberL:
		for _, x := range v.Value {
			if e.holds(x) {
				return true
			}
		}
	case *types.AttributeValueMemberM:
		for _, x := range v.Value {
			if e.holds(x) {
				return true
			}
		}
	}
	return false
}

// ciphertextItems are the keys of the items under id's partition, and of
// any item anywhere in the table holding a sealed ciphertext.
func (e *cipherEnv) ciphertextItems(id string) (ofJob, withSecret []string) {
	e.t.Helper()
	for _, av := range e.items() {
		pk, sk := getS(av, "pk"), getS(av, "sk")
		if pk == jobPK("site", id) {
			ofJob = append(ofJob, sk)
		}
		for _, v := range av {
			if e.holds(v) {
				withSecret = append(withSecret, strings.ReplaceAll(pk, "\x00", "/")+" "+sk)
				break
			}
		}
	}
	return ofJob, withSecret
}

// objectsLeft GETs each key straight from the bucket and answers those that
// can still be read.
func (e *cipherEnv) objectsLeft(keys []string) []string {
	e.t.Helper()
	var left []string
	for _, k := range keys {
		out, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: &e.bucket, Key: aws.String(k)})
		if err == nil {
			out.Body.Close()
			left = append(left, k)
			continue
		}
		if !strings.Contains(err.Error(), "NoSuchKey") {
			e.t.Fatalf("get %s: %v", k, err)
		}
	}
	return left
}

// TestNoCiphertextOutlivesItsJob ends a job by every path there is, with
// envelopes in items and in S3 and with or without a live stream's sealed
// frames, and then reads the table (every item, by a Scan) and the bucket
// (a GET of every key the job wrote) directly: once
// the sweep that ends the job has run, no item holds its ciphertext and no
// object can be read back. A job that did not finish ends at its deadline,
// in the pass that removes it; a finished one at its deadline plus the
// result grace, when a collect can no longer list its result.
func TestNoCiphertextOutlivesItsJob(t *testing.T) {
	type path struct {
		name string
		// run takes the claimed job to its end; finished says whether it
		// ends done (listed for the grace) rather than removed.
		run      func(e *cipherEnv, g store.Claimed, size int)
		finished bool
	}
	paths := []path{
		{"completed", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
			e.complete(g, size, store.DispositionOK)
		}, true},
		{"completed unsealed", func(e *cipherEnv, g store.Claimed, size int) {
			e.complete(g, size, store.DispositionError)
		}, true},
		{"cancelled, reported canceled", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
			e.cancel(g)
			e.complete(g, size, store.DispositionCanceled)
		}, true},
		{"cancelled, never reported", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
			e.cancel(g)
		}, false},
		{"expired while running", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
		}, false},
		{"streamed and completed", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
			e.stream(g)
			e.complete(g, size, store.DispositionOK)
		}, true},
		{"streamed and expired while running", func(e *cipherEnv, g store.Claimed, size int) {
			e.seal(g, size)
			e.stream(g)
		}, false},
	}
	sizes := []struct {
		name string
		size int
	}{{"in items", 200}, {"in S3", 4096}}
	for _, p := range paths {
		for _, sz := range sizes {
			t.Run(p.name+" "+sz.name, func(t *testing.T) {
				e := newCipherEnv(t)
				deadline := e.now() + 30_000
				g := e.claimed("a", deadline)
				p.run(e, g, sz.size)
				keys := bucketKeys(t, e.s3, e.bucket)
				if sz.size > 1024 && len(keys) == 0 {
					t.Fatal("no envelope went to S3")
				}
				if _, with := e.ciphertextItems("a"); sz.size <= 1024 && len(with) == 0 {
					t.Fatal("no item holds the ciphertext before the end: the check proves nothing")
				}

				// At the deadline an unfinished job is removed, and its
				// ciphertext goes in the same pass.
				e.clock.Advance(30 * time.Second)
				removed := e.sweep()
				if !p.finished {
					if len(removed) != 1 || removed[0] != "a" {
						t.Fatalf("removed %v, want a", removed)
					}
					e.gone(keys)
					return
				}
				if len(removed) != 0 {
					t.Fatalf("a finished job was reported removed: %v", removed)
				}
				// A collect may still list the result for the grace.
				if got, err := e.s.Finished(e.ctx, "site", store.ResultGraceMs); err != nil || len(got) != 1 {
					t.Fatalf("in the grace, a collect lists %d results (%v), want 1", len(got), err)
				}
				e.clock.Advance(time.Duration(store.ResultGraceMs) * time.Millisecond)
				e.sweep()
				e.gone(keys)
				if _, ok, err := e.s.Job(e.ctx, "site", "a"); err != nil || ok {
					t.Fatalf("job after its end: %v %v", ok, err)
				}
			})
		}
	}
}

// gone fails unless nothing of job "a" holds ciphertext: no item anywhere
// in the table holds a secret, the job's partition holds at most its
// tombstone, and no key the job wrote can be read from the bucket.
func (e *cipherEnv) gone(keys []string) {
	e.t.Helper()
	ofJob, with := e.ciphertextItems("a")
	if len(with) != 0 {
		e.t.Fatalf("items still holding ciphertext: %q", with)
	}
	if len(ofJob) > 1 || (len(ofJob) == 1 && ofJob[0] != skJob) {
		e.t.Fatalf("the job's partition still holds %q", ofJob)
	}
	if len(ofJob) == 1 {
		av, err := e.s.getRaw(e.ctx, jobPK("site", "a"), skJob)
		if err != nil || !getBool(av, "gone") {
			e.t.Fatalf("the job item left is not a tombstone: %v", err)
		}
	}
	if left := e.objectsLeft(keys); len(left) != 0 {
		e.t.Fatalf("objects still readable: %v", left)
	}
}

func getBool(av map[string]types.AttributeValue, name string) bool {
	v, ok := av[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

// TestAFailedDeleteIsRetriedBySweep: the bucket refuses every delete while
// two jobs end, one removed at its deadline and one finished. The sweep
// still does the rest of its work (the removal is reported, the finished
// job's item is gone, no item holds ciphertext) and fails nothing; each
// refused delete, one per object and attempt, is reported to
// OnObjectDeleteFailed (the metric an alarm watches); each job's end item,
// still on the due index a little later, brings a later sweep back, which
// deletes the objects once the bucket takes deletes again and reports no
// more failures.
func TestAFailedDeleteIsRetriedBySweep(t *testing.T) {
	e := newCipherEnv(t)
	deadline := e.now() + 30_000
	ga := e.claimed("a", deadline)
	e.seal(ga, 4096)
	e.complete(ga, 4096, store.DispositionOK)
	gb := e.claimed("b", deadline)
	e.seal(gb, 4096)
	keys := bucketKeys(t, e.s3, e.bucket)
	if len(keys) != 3 {
		t.Fatalf("bucket holds %v, want a's payload and result and b's payload", keys)
	}

	e.objs.failing.Store(true)
	e.clock.Advance(30*time.Second + time.Duration(store.ResultGraceMs)*time.Millisecond)
	if removed := e.sweep(); len(removed) != 1 || removed[0] != "b" {
		t.Fatalf("with deletes failing, the sweep removed %v, want b", removed)
	}
	if left := e.objectsLeft(keys); len(left) != 3 {
		t.Fatalf("deletes failed, yet readable objects are %v", left)
	}
	refused := e.objs.refused.Load()
	if got := e.deleteFailures.Load(); refused < 3 || got != refused {
		t.Fatalf("the bucket refused %d deletes (at least one per object), the store reported %d", refused, got)
	}
	if _, ok, err := e.s.Job(e.ctx, "site", "b"); err != nil || ok {
		t.Fatalf("b after its removal: %v %v", ok, err)
	}
	for _, id := range []string{"a", "b"} {
		ofJob, with := e.ciphertextItems(id)
		if len(with) != 0 {
			t.Fatalf("%s: items holding ciphertext after the sweep: %q", id, with)
		}
		// What is left names the objects, and falls due again later, so
		// in-line sweeps meanwhile do not spend themselves on it.
		end, err := e.s.getRaw(e.ctx, jobPK("site", id), skEnd)
		if err != nil || end == nil || len(getSS(end, "s3")) == 0 || getN(end, "du") <= e.now() {
			t.Fatalf("%s: partition %q; its end item %v (%v) should name its objects and be due later", id, ofJob, end, err)
		}
	}

	e.objs.failing.Store(false)
	e.clock.Advance(time.Duration(endRetryMs) * time.Millisecond)
	if removed := e.sweep(); len(removed) != 0 {
		t.Fatalf("the retry reported %v removed again", removed)
	}
	if left := e.objectsLeft(keys); len(left) != 0 {
		t.Fatalf("after the retry, objects still readable: %v", left)
	}
	if got := e.deleteFailures.Load(); got != refused {
		t.Fatalf("the retry's deletes succeeded, yet %d more failures were reported", got-refused)
	}
	for _, id := range []string{"a", "b"} {
		ofJob, with := e.ciphertextItems(id)
		if len(with) != 0 || len(ofJob) > 1 {
			t.Fatalf("%s after the retry: partition %q, ciphertext in %q", id, ofJob, with)
		}
	}
}

// TestAnInlineSweepLeavesAJobsEndToTheScheduledSweep: a finished job's
// end (reading it, querying its partition, deleting its ciphertext) is the
// scheduled sweep's work, never a request's: past the job's end an in-line
// sweep leaves every item of it in place, and the scheduled sweep then
// deletes them.
func TestAnInlineSweepLeavesAJobsEndToTheScheduledSweep(t *testing.T) {
	e := newCipherEnv(t)
	deadline := e.now() + 60_000
	g := e.claimed("done", deadline)
	e.seal(g, 100)
	e.complete(g, 100, store.DispositionOK)
	e.clock.Advance(time.Duration(deadline-e.now()+store.ResultGraceMs+1) * time.Millisecond)

	if _, err := e.s.SweepInline(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, withSecret := e.ciphertextItems("done"); len(withSecret) == 0 {
		t.Fatal("an in-line sweep deleted a finished job's ciphertext: a request paid for its end")
	}
	e.sweep()
	if ofJob, withSecret := e.ciphertextItems("done"); len(ofJob) != 0 || len(withSecret) != 0 {
		t.Fatalf("after the scheduled sweep: items %q, with ciphertext %q", ofJob, withSecret)
	}
}
