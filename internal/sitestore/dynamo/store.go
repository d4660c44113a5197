package dynamo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/ids"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// CreateTable creates a site table (tableInput) for tests and local runs; a
// deployment gets it from CloudFormation.
func CreateTable(ctx context.Context, api ddb.TableCreator, name string) error {
	if _, err := api.CreateTable(ctx, tableInput(name)); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	// TTL is only a backstop (Store.ended), so a local service that
	// refuses the call is not an error.
	_, _ = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(ttlAttribute), Enabled: aws.Bool(true),
		},
	})
	return nil
}

// ttlAttribute is the site table's TTL attribute. An envelope or
// checkpoint item carries it as the backstop for an ended job's envelope
// whose delete failed; an ended job's item carries it as the end of its
// retention (Config.RetentionMs).
const ttlAttribute = "ttl"

// tableInput is the CreateTable input for a site table named name: the
// SiteTable resource of site-template.yaml, written out as Go values so that
// the site functions link neither a YAML parser nor the template.
// TestTheTableIsSiteTemplateYAMLs holds the two equal, TTL included
// (ttlAttribute).
func tableInput(name string) *dynamodb.CreateTableInput {
	s := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			s("pk"), s("sk"), s("qpk"), s("qsk"), s("dpk"),
			{AttributeName: aws.String("dsk"), AttributeType: types.ScalarAttributeTypeN},
			s("gpk"), s("gsk"),
		},
		KeySchema: ddb.KeySchema("pk", "sk"),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			// Claimable jobs in claim order; sparse.
			ddb.GSI("claimable", "qpk", "qsk", types.ProjectionTypeAll),
			// Work the clock will make due, by when.
			ddb.GSI("due", "dpk", "dsk", types.ProjectionTypeKeysOnly),
			// Groups read as lists: a runner's jobs, every runner.
			ddb.GSI("group", "gpk", "gsk", types.ProjectionTypeAll),
		},
		// Subscribe across processes reads the keys of every write.
		StreamSpecification: &types.StreamSpecification{
			StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly,
		},
	}
}

// Limits.
const (
	// DefaultInlineSweepLimit bounds the due work a claim or heartbeat
	// fires before answering: paid inside a device's request, so small;
	// larger than ordinary traffic makes due between two claims.
	DefaultInlineSweepLimit = 25
	// DefaultDueShards spreads the due index so that no partition of it
	// passes DynamoDB's 1,000 writes a second per partition at 10,000
	// jobs a second: a job writes its due entry about three times (create,
	// claim or seal, end), 30,000 writes a second over 64 shards is under
	// 500 a shard, half the limit.
	DefaultDueShards = 64
	// MaxDueShards bounds DueShards (and so what a full sweep reads).
	MaxDueShards = 1024
	// DefaultSweepWorkers is how many shards a full sweep works at once:
	// goroutines in one invocation, bounded so that one sweep holds at
	// most that many pages of ids (sweepPage each) and that many calls in
	// flight, whatever the backlog.
	DefaultSweepWorkers = 16
	// sweepPage is how many due ids a sweep worker reads per page.
	sweepPage = 100
	// DefaultRunnerRefreshMs bounds how stale a runner's stored heartbeat
	// time grows: 15 s, under the site's 35 s liveness window less the
	// daemon's 10 s heartbeat, so a live runner is never judged offline.
	DefaultRunnerRefreshMs = 15_000
	// maxAttempts bounds one job's read-decide-write loop under contention.
	maxAttempts = 8
	// claimScanLimit bounds how many claimable candidates one claim reads
	// (a queue full of jobs this runner refused must not make its claim
	// unbounded).
	claimScanLimit = 400
	// MaxEnvelopeItemBytes is the largest at-rest envelope kept inline; an
	// item is at most 400 KB. A larger one is offloaded to the bucket
	// (Config.Objects) up to the protocol's ceiling, and refused
	// (ErrTooLarge) by a store without one, never truncated.
	MaxEnvelopeItemBytes = 350 * 1024
)

// ErrTooLarge is Create's refusal of an envelope over MaxEnvelopeItemBytes
// with no bucket to offload it to, or over the protocol's ceiling.
var ErrTooLarge = sitestore.ErrTooLarge

// Config is what New needs.
type Config struct {
	DB    ddb.API
	Table string
	// Clock is the one clock; nil is the host clock.
	Clock clock.Clock
	// DefaultTTLMs is a job's TTL when its creator names none.
	DefaultTTLMs int64
	// InlineSweepLimit overrides DefaultInlineSweepLimit.
	InlineSweepLimit int
	// DueShards is how many partitions the due index is spread over;
	// 0 is DefaultDueShards.
	DueShards int
	// PreviousDueShards is the shard count before the last change of
	// DueShards, 0 if it never changed. The full sweep also reads the
	// shards that only the old count wrote (an entry moves to the new
	// count's shard when its job is next written), so keep it until the
	// longest-lived job written under the old count has ended.
	PreviousDueShards int
	// SweepWorkers bounds the shards a full sweep works at once; 0 is
	// DefaultSweepWorkers.
	SweepWorkers int
	// RetentionMs is how long an ended job's item, its sealed answer with
	// it, is kept: its TTL is set that long after the job ended
	// (sitestore.RetainedUntil), and DynamoDB deletes it after that
	// (typically within a few days of it; a read before then still finds
	// the job). 0 is sitestore.DefaultRetentionMs.
	RetentionMs int64
	// RunnerRefreshMs is how stale a runner's stored heartbeat time may
	// grow before a heartbeat of an otherwise unchanged runner rewrites it
	// (TouchRunner); 0 is DefaultRunnerRefreshMs.
	RunnerRefreshMs int64
	// Meter, when set, counts the capacity every call consumes.
	Meter *ddb.Meter
	// AWS, when set, makes Subscribe hear every process's writes: a
	// DynamoDB Streams client is built from it on the first Subscribe and
	// reads the table's stream (streams.go). Without it (and without
	// Streams) Subscribe hears only this instance's writes.
	AWS *aws.Config
	// Streams overrides the client AWS would build.
	Streams StreamsAPI
	// Objects, when set, keeps an at-rest envelope over
	// MaxEnvelopeItemBytes in a bucket; without it such an envelope is
	// refused (ErrTooLarge). The object is deleted when the job ends.
	Objects Objects
	// OnObjectDeleteFailed, when set, hears each object delete that
	// failed (also counted, ObjectDeleteFailures): the object then stays
	// until the bucket's lifecycle rule.
	OnObjectDeleteFailed func(error)
}

// Store is the DynamoDB site store.
type Store struct {
	db          ddb.API
	table       string
	clock       clock.Clock
	defaultTTL  int64
	inlineLimit int
	watchers    sitestore.Watchers
	// dueShards and prevDueShards: Config.DueShards, PreviousDueShards.
	dueShards     int
	prevDueShards int
	sweepWorkers  int
	runnerRefresh int64
	retention     int64
	// inlineNext picks the shard the next in-line sweep reads: round
	// robin from a random start, so every shard is read by some claim or
	// heartbeat of every instance, and no two instances march in step.
	inlineNext atomic.Uint32
	awsConfig  *aws.Config
	streamsAPI StreamsAPI
	reader     *streamReader // nil: no table stream is read

	objects              Objects
	onObjectDeleteFailed func(error)
	objectDeleteFailures atomic.Int64
}

var (
	_ sitestore.Store    = (*Store)(nil)
	_ sitestore.Resetter = (*Store)(nil)
)

// New returns a store over an existing table.
func New(cfg Config) (*Store, error) {
	if cfg.DB == nil || cfg.Table == "" {
		return nil, errors.New("sitestore/dynamo: Config needs DB and Table")
	}
	if cfg.DueShards < 0 || cfg.DueShards > MaxDueShards || cfg.PreviousDueShards < 0 || cfg.PreviousDueShards > MaxDueShards {
		return nil, fmt.Errorf("sitestore/dynamo: due shards must be 0..%d", MaxDueShards)
	}
	s := &Store{db: cfg.DB, table: cfg.Table, clock: cfg.Clock, defaultTTL: cfg.DefaultTTLMs, inlineLimit: cfg.InlineSweepLimit,
		dueShards: cmp.Or(cfg.DueShards, DefaultDueShards), prevDueShards: cfg.PreviousDueShards,
		sweepWorkers: cmp.Or(cfg.SweepWorkers, DefaultSweepWorkers), runnerRefresh: cmp.Or(cfg.RunnerRefreshMs, DefaultRunnerRefreshMs),
		retention: cmp.Or(cfg.RetentionMs, sitestore.DefaultRetentionMs),
		objects:   cfg.Objects, onObjectDeleteFailed: cfg.OnObjectDeleteFailed}
	s.inlineNext.Store(rand.Uint32())
	if s.clock == nil {
		s.clock = clock.System{}
	}
	if s.defaultTTL == 0 {
		s.defaultTTL = sitestore.DefaultTTLMs
	}
	if s.inlineLimit == 0 {
		s.inlineLimit = DefaultInlineSweepLimit
	}
	if cfg.Meter != nil {
		s.db = cfg.Meter.Wrap(s.db)
	}
	if cfg.AWS != nil || cfg.Streams != nil {
		s.awsConfig, s.streamsAPI = cfg.AWS, cfg.Streams
		s.reader = &streamReader{s: s}
	}
	return s, nil
}

func (s *Store) now() int64 { return s.clock.Now().UnixMilli() }

// Now is the store clock.
func (s *Store) Now(context.Context) (int64, error) { return s.now(), nil }

// Subscribe hears the writes this instance makes to the job at once and,
// with Config.AWS (or Streams) set, every process's writes through the
// table's DynamoDB stream within StreamHeardWithin (streams.go).
func (s *Store) Subscribe(jobID string, onChange func()) func() {
	stop := s.watchers.Subscribe(jobID, onChange)
	if s.reader == nil {
		return stop
	}
	s.reader.add()
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			s.reader.remove()
		})
	}
}

// --- keys and items ------------------------------------------------------

const (
	skJob = "JOB"
	skEnv = "ENV"
	// dueKey and unblockPK prefix the due index's partitions: a job's
	// entry is in dueKey#<shard> (unblockPK#<shard> for a marker), its
	// shard a hash of its id (dueShard). The unsharded dueKey and
	// unblockPK partitions are still read by the full sweep, so a table
	// written before the index was sharded is drained.
	dueKey    = "DUE"
	unblockPK = "UNBLOCK"
	runnersPK = "RUNNERS"
	// unpublishedPK is the group partition of the cloud-lane jobs whose
	// stub the relay has not accepted yet: sparse, so a restarted site
	// finds what to publish again without a scan.
	unpublishedPK = "UNPUBLISHED"
	// inFlightPK is the group partition of the cloud-lane jobs the relay
	// holds and that have not ended (Job.InFlight): sparse, so the pump
	// learns whether it may stop from one page of it.
	inFlightPK = "INFLIGHT"
)

func jobPK(id string) string { return "JOB#" + id }

// dueShard is the shard of the due index a job's entry goes in.
func dueShard(id string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

// shardPK is partition prefix#shard of the due index.
func shardPK(prefix string, shard int) string { return prefix + "#" + strconv.Itoa(shard) }
func depPK(dep string) string                 { return "DEP#" + dep }
func heldPK(runner string) string             { return "HELD#" + runner }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

// jobItem is a job as stored.
type jobItem struct {
	PK  string `dynamodbav:"pk"`
	SK  string `dynamodbav:"sk"`
	Doc string `dynamodbav:"doc"`
	Ver int64  `dynamodbav:"ver"`
	WID string `dynamodbav:"wid"`
	QPK string `dynamodbav:"qpk,omitempty"`
	QSK string `dynamodbav:"qsk,omitempty"`
	DPK string `dynamodbav:"dpk,omitempty"`
	DSK int64  `dynamodbav:"dsk,omitempty"`
	GPK string `dynamodbav:"gpk,omitempty"`
	GSK string `dynamodbav:"gsk,omitempty"`
	// TTL is set once the job has ended: DynamoDB deletes the item, its
	// sealed answer with it, after the retention.
	TTL int64 `dynamodbav:"ttl,omitempty"`
}

// stored is a job as read: the record and the version it was read at.
type stored struct {
	job sitestore.Job
	ver int64
	wid string
}

// claimKey orders the claimable index: claimableAt, then id.
func claimKey(claimableAt int64, id string) string { return fmt.Sprintf("%016d#%s", claimableAt, id) }

// itemOf builds the item for j at version ver. Every index key is derived
// from the record here and nowhere else, so an index cannot disagree with
// the job it points at. unblockPending marks a job completed ok whose
// dependents are still to be told; shards is the due index's shard count;
// retention is Config.RetentionMs, from which an ended job's item gets its
// TTL (sitestore.RetainedUntil, in epoch seconds as DynamoDB reads it).
func itemOf(j sitestore.Job, ver int64, wid string, unblockPending bool, shards int, retention int64) (map[string]types.AttributeValue, error) {
	rec := j
	rec.Envelope = protocol.SealedEnvelope{}
	doc, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	it := jobItem{PK: jobPK(j.ID), SK: skJob, Doc: string(doc), Ver: ver, WID: wid}
	if until := sitestore.RetainedUntil(j, retention); until != 0 {
		it.TTL = (until + 999) / 1000
	}
	queue := "Q#T"
	if j.Audience != protocol.AudienceTeam {
		queue = "Q#P#" + j.Owner
	}
	held := j.State == sitestore.StateClaimed || j.State == sitestore.StateRunning
	switch {
	case j.State == sitestore.StateQueued && j.ClaimableAt != 0:
		it.QPK, it.QSK = queue, claimKey(j.ClaimableAt, j.ID)
	case held && j.Lease != nil && !j.Adopted():
		// A runner's lease is in its queue at its expiry, so the first
		// claim after it lapses finds the job (Claim's rule requeues and
		// grants it) without a sweep having reached the job's due shard:
		// an in-line sweep reads one shard of many.
		it.QPK, it.QSK = queue, claimKey(j.Lease.ExpiresAt, j.ID)
	}
	if due := sitestore.DueAt(j); due != 0 {
		it.DPK, it.DSK = shardPK(dueKey, dueShard(j.ID, shards)), due
	} else if unblockPending && j.State == sitestore.StateOK {
		it.DPK, it.DSK = shardPK(unblockPK, dueShard(j.ID, shards)), j.UpdatedAt
	}
	if j.Lease != nil && j.Lease.RunnerID != "" {
		it.GPK, it.GSK = heldPK(j.Lease.RunnerID), j.ID
	} else if j.NeedsPublish() {
		// A cloud-lane job is never held by one of this site's runners
		// (its lease, if any, is adopted), so the two never compete.
		it.GPK, it.GSK = unpublishedPK, j.ID
	} else if j.InFlight() {
		it.GPK, it.GSK = inFlightPK, j.ID
	}
	return attributevalue.MarshalMap(it)
}

func decodeJob(av map[string]types.AttributeValue) (stored, error) {
	var it jobItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return stored{}, err
	}
	var j sitestore.Job
	if err := json.Unmarshal([]byte(it.Doc), &j); err != nil {
		return stored{}, fmt.Errorf("job item %s: %w", it.PK, err)
	}
	return stored{job: j, ver: it.Ver, wid: it.WID}, nil
}

// readJob reads a job item consistently (without its envelope).
func (s *Store) readJob(ctx context.Context, id string) (stored, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(jobPK(id), skJob), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return stored{}, false, fmt.Errorf("get job %s: %w", id, err)
	}
	if out.Item == nil {
		return stored{}, false, nil
	}
	st, err := decodeJob(out.Item)
	return st, err == nil, err
}

// errConflict is a version condition that failed: somebody else wrote.
var errConflict = errors.New("conflict")

// putJob writes j over version ver (0: the item must not exist).
func (s *Store) putJob(ctx context.Context, j sitestore.Job, ver int64, wid string, unblockPending bool) error {
	item, err := itemOf(j, ver+1, wid, unblockPending, s.dueShards, s.retention)
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: item}
	if ver == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("ver = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: fmt.Sprint(ver)}}
	}
	_, err = s.db.PutItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("put job %s: %w", j.ID, err)
	}
	return nil
}

// rule decides one job's next state from the job as read and the store
// clock. write false leaves the job as it is.
type rule func(j sitestore.Job, now int64) (next sitestore.Job, write bool)

// apply is the read-decide-write loop: start from first if given (an
// index's copy), else a consistent read; decide; write conditioned on the
// version read; on conflict read again and decide again. It returns the job
// as it stands after the call and whether it exists.
func (s *Store) apply(ctx context.Context, id string, first *stored, r rule, unblockPending bool) (sitestore.Job, bool, error) {
	cur := first
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if cur == nil {
			st, found, err := s.readJob(ctx, id)
			if err != nil || !found {
				return sitestore.Job{}, found, err
			}
			cur = &st
		}
		next, write := r(sitestore.CopyJob(cur.job), s.now())
		if !write {
			return cur.job, true, nil
		}
		wid := ids.UUID()
		err := s.putJob(ctx, next, cur.ver, wid, unblockPending)
		ending := next.Ended() && !cur.job.Ended()
		if err == nil {
			s.ended(ctx, id, ending)
			s.watchers.Notify(id)
			return next, true, nil
		}
		if !errors.Is(err, errConflict) {
			// The write may have landed with its answer lost: if the item
			// now carries our write id, it did.
			if st, found, rerr := s.readJob(ctx, id); rerr == nil && found && st.wid == wid {
				s.ended(ctx, id, ending)
				s.watchers.Notify(id)
				return next, true, nil
			}
			return sitestore.Job{}, false, err
		}
		cur = nil
		backoff(ctx, attempt)
	}
	return sitestore.Job{}, false, fmt.Errorf("job %s: %w", id, sitestore.ErrContention)
}

// ended drops the at-rest envelope of a job whose ending write (ending:
// it made the job sitestore.Job.Ended) committed. After that write, never
// before: an ended job stays ended, so nothing can need the envelope
// again, whereas a job whose ending write lost its race may still be
// live. Not in the write's transaction, which would bill the job's write
// and the delete twice over: a delete that fails leaves the item to the
// table's TTL, set at the envelope's own deadline plus a day (Create),
// past which no device accepts the payload anyway.
func (s *Store) ended(ctx context.Context, id string, ending bool) {
	if !ending {
		return
	}
	ctx = context.WithoutCancel(ctx)
	out, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(jobPK(id), skEnv),
		ReturnValues: types.ReturnValueAllOld})
	if err == nil && out != nil {
		// An envelope offloaded to the bucket goes with its item.
		s.dropObject(ctx, objectOf(out.Attributes))
	}
}

// backoff waits a little, more each time, before re-reading a contended
// job: replicas that collided once should not collide again in lockstep.
func backoff(ctx context.Context, attempt int) {
	if attempt == 0 {
		return
	}
	_ = clock.Sleep(ctx, time.Duration(1<<min(attempt, 6))*time.Millisecond)
}
