package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/sitestore"
	"github.com/byorelay/byorelay/store"
	storedynamo "github.com/byorelay/byorelay/store/dynamo"
)

// CreateTable creates a site table (tableInput) for tests and local runs; a
// deployment gets it from CloudFormation.
func CreateTable(ctx context.Context, api storedynamo.TableCreator, name string) error {
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

// ttlAttribute is the site table's TTL attribute. Only envelope items
// carry it: the backstop for an ended job's envelope whose delete failed.
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
		KeySchema: keySchema("pk", "sk"),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			// Claimable jobs in claim order; sparse.
			gsi("claimable", "qpk", "qsk", types.ProjectionTypeAll),
			// Work the clock will make due, by when.
			gsi("due", "dpk", "dsk", types.ProjectionTypeKeysOnly),
			// Groups read as lists: a runner's jobs, every runner.
			gsi("group", "gpk", "gsk", types.ProjectionTypeAll),
		},
	}
}

// keySchema is a (HASH, RANGE) key schema.
func keySchema(hash, rng string) []types.KeySchemaElement {
	return []types.KeySchemaElement{
		{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(rng), KeyType: types.KeyTypeRange},
	}
}

// gsi is a global secondary index keyed (hash, rng).
func gsi(name, hash, rng string, projection types.ProjectionType) types.GlobalSecondaryIndex {
	return types.GlobalSecondaryIndex{
		IndexName:  aws.String(name),
		KeySchema:  keySchema(hash, rng),
		Projection: &types.Projection{ProjectionType: projection},
	}
}

// Limits.
const (
	// DefaultInlineSweepLimit bounds the due work a claim or heartbeat
	// fires before answering: paid inside a device's request, so small;
	// larger than ordinary traffic makes due between two claims.
	DefaultInlineSweepLimit = 25
	// maxAttempts bounds one job's read-decide-write loop under contention.
	maxAttempts = 8
	// claimScanLimit bounds how many claimable candidates one claim reads
	// (a queue full of jobs this runner refused must not make its claim
	// unbounded).
	claimScanLimit = 400
	// MaxEnvelopeItemBytes is the largest at-rest envelope kept inline; an
	// item is at most 400 KB. Larger payloads are refused (ErrTooLarge)
	// rather than silently truncated.
	MaxEnvelopeItemBytes = 350 * 1024
)

// ErrTooLarge is Create's refusal of an envelope over MaxEnvelopeItemBytes.
var ErrTooLarge = sitestore.ErrTooLarge

// Config is what New needs.
type Config struct {
	DB    storedynamo.API
	Table string
	// Clock is the one clock; nil is the host clock.
	Clock store.Clock
	// DefaultTTLMs is a job's TTL when its creator names none.
	DefaultTTLMs int64
	// InlineSweepLimit overrides DefaultInlineSweepLimit.
	InlineSweepLimit int
	// Meter, when set, counts the capacity every call consumes.
	Meter *storedynamo.Meter
}

// Store is the DynamoDB site store.
type Store struct {
	db          storedynamo.API
	table       string
	clock       store.Clock
	defaultTTL  int64
	inlineLimit int
	watchers    sitestore.Watchers
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
	s := &Store{db: cfg.DB, table: cfg.Table, clock: cfg.Clock, defaultTTL: cfg.DefaultTTLMs, inlineLimit: cfg.InlineSweepLimit}
	if s.clock == nil {
		s.clock = store.SystemClock{}
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
	return s, nil
}

func (s *Store) now() int64 { return s.clock.Now().UnixMilli() }

// Now is the store clock.
func (s *Store) Now(context.Context) (int64, error) { return s.now(), nil }

// Subscribe hears the writes this instance makes to the job. Another
// replica's writes are not heard (a stream consumer would be the cross-
// replica seam); a waiter re-reads regardless.
func (s *Store) Subscribe(jobID string, onChange func()) func() {
	return s.watchers.Subscribe(jobID, onChange)
}

// --- keys and items ------------------------------------------------------

const (
	skJob     = "JOB"
	skEnv     = "ENV"
	dueKey    = "DUE"
	unblockPK = "UNBLOCK"
	runnersPK = "RUNNERS"
	// unpublishedPK is the group partition of the cloud-lane jobs whose
	// stub the relay has not accepted yet: sparse, so a restarted site
	// finds what to publish again without a scan.
	unpublishedPK = "UNPUBLISHED"
)

func jobPK(id string) string      { return "JOB#" + id }
func depPK(dep string) string     { return "DEP#" + dep }
func heldPK(runner string) string { return "HELD#" + runner }

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
// dependents are still to be told.
func itemOf(j sitestore.Job, ver int64, wid string, unblockPending bool) (map[string]types.AttributeValue, error) {
	rec := j
	rec.Envelope = protocol.SealedEnvelope{}
	doc, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	it := jobItem{PK: jobPK(j.ID), SK: skJob, Doc: string(doc), Ver: ver, WID: wid}
	if j.State == sitestore.StateQueued && j.ClaimableAt != 0 {
		it.QPK = "Q#T"
		if j.Audience != protocol.AudienceTeam {
			it.QPK = "Q#P#" + j.Owner
		}
		it.QSK = claimKey(j.ClaimableAt, j.ID)
	}
	if due := sitestore.DueAt(j); due != 0 {
		it.DPK, it.DSK = dueKey, due
	} else if unblockPending && j.State == sitestore.StateOK {
		it.DPK, it.DSK = unblockPK, j.UpdatedAt
	}
	if j.Lease != nil && j.Lease.RunnerID != "" {
		it.GPK, it.GSK = heldPK(j.Lease.RunnerID), j.ID
	} else if j.NeedsPublish() {
		// A cloud-lane job is never held by one of this site's runners
		// (its lease, if any, is adopted), so the two never compete.
		it.GPK, it.GSK = unpublishedPK, j.ID
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
	item, err := itemOf(j, ver+1, wid, unblockPending)
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
		wid := store.NewLeaseID()
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
	_, _ = s.db.DeleteItem(context.WithoutCancel(ctx), &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(jobPK(id), skEnv)})
}

// backoff waits a little, more each time, before re-reading a contended
// job: replicas that collided once should not collide again in lockstep.
func backoff(ctx context.Context, attempt int) {
	if attempt == 0 {
		return
	}
	d := time.Duration(1<<min(attempt, 6)) * time.Millisecond
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
