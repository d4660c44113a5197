package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Enqueue takes a stub, idempotently per (site, id): a conditional put that
// creates the job only if the key is free, and otherwise the job as stored.
func (s *Store) Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error) {
	stub, err := json.Marshal(in.Stub)
	if err != nil {
		return store.Job{}, fmt.Errorf("encode stub: %w", err)
	}
	now := s.now()
	pk := jobPK(in.SiteID, in.ID)
	// 0: the key must be free. A removed job's tombstone, or an item TTL
	// has not collected yet, is overwritten under its version instead.
	ver := int64(0)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j := &jobItem{
			PK: pk, SK: skJob, Site: in.SiteID, JobID: in.ID, Stub: string(stub),
			Owner: in.Stub.Owner, Kind: in.Stub.Kind, Audience: in.Stub.Audience,
			Deadline: in.Stub.DeadlineAt, State: string(store.StateQueued), Seq: s.nextSeq(now),
		}
		out, _, err := s.commit(ctx, jobWrite{pk: pk, put: j, ver: ver})
		if err != nil {
			return store.Job{}, err
		}
		if out == committed {
			return j.job()
		}
		av, err := s.getRaw(ctx, pk, skJob)
		if err != nil {
			return store.Job{}, err
		}
		if av == nil {
			ver = 0
			continue
		}
		existing, err := unmarshalJob(av)
		if err != nil {
			return store.Job{}, err
		}
		if s.absent(existing) {
			ver = existing.Ver
			continue
		}
		if err := s.loadEnvelopes(ctx, existing); errors.Is(err, errEnvelopeGone) {
			ver = existing.Ver
			continue
		} else if err != nil {
			return store.Job{}, err
		}
		return existing.job()
	}
	return store.Job{}, ErrContention
}

// Job finds one job by (site, id).
func (s *Store) Job(ctx context.Context, siteID, jobID string) (store.Job, bool, error) {
	j, ok, err := s.loadJob(ctx, jobPK(siteID, jobID))
	if err != nil || !ok {
		return store.Job{}, false, err
	}
	out, err := j.job()
	return out, err == nil, err
}

// readJob reads a job item strongly consistently, without its S3 envelopes.
// A removed job (its tombstone) or one whose TTL has passed is absent: TTL
// deletes lazily, so an item that is still there may be gone on the next
// read anyway.
func (s *Store) readJob(ctx context.Context, pk string) (*jobItem, bool, error) {
	av, err := s.getRaw(ctx, pk, skJob)
	if err != nil || av == nil {
		return nil, false, err
	}
	j, err := unmarshalJob(av)
	if err != nil {
		return nil, false, err
	}
	if s.absent(j) {
		return nil, false, nil
	}
	return j, true, nil
}

// loadJob is readJob plus the envelopes held in S3.
func (s *Store) loadJob(ctx context.Context, pk string) (*jobItem, bool, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, ok, err := s.readJob(ctx, pk)
		if err != nil || !ok {
			return nil, false, err
		}
		if err := s.loadEnvelopes(ctx, j); errors.Is(err, errEnvelopeGone) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		return j, true, nil
	}
	return nil, false, ErrContention
}

// absent reports an item that stands for no job: a tombstone, a finished
// job past its deadline (it expires, see jobItem.index), or past its TTL
// and not yet collected.
func (s *Store) absent(j *jobItem) bool { return s.absentAfter(j, 0) }

// absentAfter is absent, but a finished job stays present graceMs past its
// deadline: a collect's listing, and nothing else, reads results that late
// (store.RoutingStore.Finished).
func (s *Store) absentAfter(j *jobItem, graceMs int64) bool {
	now := s.now()
	return j.Gone || (j.State == string(store.StateDone) && j.Deadline+graceMs <= now) || (j.TTL != 0 && j.TTL*1000 <= now)
}

// QueuedFor lists up to limit of owner's queued jobs at siteID, oldest
// first (store.QueuedLister): one query of at most limit items in each of
// the person's queue partitions, one per job kind, audience and stream
// lane (8 with the protocol's two kinds), never a scan.
func (s *Store) QueuedFor(ctx context.Context, siteID, owner string, limit int) ([]store.Job, error) {
	now := s.now()
	var items []*jobItem
	for _, kind := range protocol.JobKinds {
		for _, private := range []bool{false, true} {
			for _, streaming := range []bool{false, true} {
				got, _, err := s.queue(ctx, queueKey(siteID, owner, kind, private, streaming), int32(limit), now)
				if err != nil {
					return nil, err
				}
				for _, j := range got {
					if j.State == string(store.StateQueued) && !j.Gone {
						items = append(items, j)
					}
				}
			}
		}
	}
	slices.SortFunc(items, func(a, b *jobItem) int { return strings.Compare(a.Seq, b.Seq) })
	if len(items) > limit {
		items = items[:limit]
	}
	return s.toJobs(ctx, items)
}

// Jobs lists every job of every site in enqueue order. A scan: for debug
// pages and tests, never on a request path.
func (s *Store) Jobs(ctx context.Context) ([]store.Job, error) {
	var items []*jobItem
	err := s.scanPrefix(ctx, "J#", func(av map[string]types.AttributeValue) error {
		if getS(av, "sk") != skJob {
			// A payload's own item, under its job's partition key.
			return nil
		}
		j, err := unmarshalJob(av)
		if err != nil {
			return err
		}
		if !s.absent(j) {
			items = append(items, j)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.toJobs(ctx, items)
}

func (s *Store) toJobs(ctx context.Context, items []*jobItem) ([]store.Job, error) {
	slices.SortFunc(items, func(a, b *jobItem) int { return strings.Compare(a.Seq, b.Seq) })
	out := make([]store.Job, 0, len(items))
	for _, j := range items {
		if err := s.loadEnvelopes(ctx, j); errors.Is(err, errEnvelopeGone) {
			// Changed or ended since the listing read it: what it is now.
			now, ok, err := s.loadJob(ctx, j.PK)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			j = now
		} else if err != nil {
			return nil, err
		}
		job, err := j.job()
		if err != nil {
			return nil, err
		}
		out = append(out, job)
	}
	return out, nil
}

// Awaiting lists the site's live grants in awaiting-payload: the members
// of the site's unsealed sets (one strongly consistent Query of their
// shared partition), then the jobs they name, read back consistently and
// kept only while still awaiting under that lease. Every live grant is in
// its pair's set (doc.go), so nothing is missed; the set may also hold a
// grant just ended or not yet written, which the job read leaves out.
func (s *Store) Awaiting(ctx context.Context, siteID string) ([]store.Job, error) {
	members, err := s.unsealedSets(ctx, siteID, true)
	if err != nil {
		return nil, err
	}
	return s.awaitingOf(ctx, siteID, members)
}

// awaitingOf is Awaiting from the members of the site's sets, read
// strongly.
func (s *Store) awaitingOf(ctx context.Context, siteID string, members []string) ([]store.Job, error) {
	now := s.now()
	leases := map[string][]string{} // job pk → the leases its members name
	var pks []string
	for _, m := range members {
		lease, jobID, window := parseSlotMember(m)
		// A member past its window is no live grant: not read.
		if window <= now {
			continue
		}
		pk := jobPK(siteID, jobID)
		if leases[pk] == nil {
			pks = append(pks, pk)
		}
		leases[pk] = append(leases[pk], lease)
	}
	items, err := s.batchJobs(ctx, pks)
	if err != nil {
		return nil, err
	}
	// A claim that lapsed but that no sweep has reached is not listed: a
	// site must not seal to a device whose claim is over.
	items = slices.DeleteFunc(items, func(j *jobItem) bool {
		return j.State != string(store.StateAwaitingPayload) || !slices.Contains(leases[j.PK], j.Lease) || j.nextDeadline() <= now
	})
	return s.toJobs(ctx, items)
}

// unsealedSets is every member of the site's unsealed sets: one Query of
// each of the site's set partitions (Config.UnsealedShards of them,
// concurrently), strongly consistent when consistent is set (the awaiting
// list must hold a grant claimed a moment ago), at half the price when
// not (a reader that wants only members written long before).
func (s *Store) unsealedSets(ctx context.Context, siteID string, consistent bool) ([]string, error) {
	found := make([][]string, s.unsealedShards)
	err := each(s.unsealedShards, func(shard int) error {
		in := &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(unsealedPK(siteID, shard))},
			ConsistentRead:            aws.Bool(consistent),
		}
		for {
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return fmt.Errorf("query unsealed sets: %w", err)
			}
			for _, av := range out.Items {
				found[shard] = append(found[shard], getSS(av, "held")...)
			}
			if len(out.LastEvaluatedKey) == 0 {
				return nil
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

// Finished lists the site's done jobs that carry a result and are not
// collected (the index lags a collect; the consistent read does not).
//
// The list is the site's partitions of the due index (keys only), one
// Query of each (Config.FinishedShards of them, concurrently). It holds a
// result until the sweep ends its job, shortly after the deadline and its
// grace (the end hook), and the consistent read leaves out those past
// theirs.
func (s *Store) Finished(ctx context.Context, siteID string, graceMs int64) ([]store.Job, error) {
	found := make([][]string, s.finishedShards)
	err := each(s.finishedShards, func(shard int) error {
		in := &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": str(finishedKey(siteID, shard)),
			},
		}
		for {
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return fmt.Errorf("query finished: %w", err)
			}
			for _, av := range out.Items {
				found[shard] = append(found[shard], getS(av, "pk"))
			}
			if len(out.LastEvaluatedKey) == 0 {
				return nil
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	})
	if err != nil {
		return nil, err
	}
	return s.finishedJobs(ctx, slices.Concat(found...), graceMs)
}

// finishedJobs reads the jobs pks names and keeps the uncollected results.
func (s *Store) finishedJobs(ctx context.Context, pks []string, graceMs int64) ([]store.Job, error) {
	items, err := s.batchJobsAfter(ctx, pks, graceMs)
	if err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, j := range items {
		if j.State == string(store.StateDone) && (j.Result != "" || j.ResultS3 != "") && !j.Collected {
			// Listed without the payload: a site reading its results has
			// no use for the envelope it sealed, and reading it back would
			// cost every poll a read per job.
			j.Payload, j.PayloadItem, j.PayloadS3 = "", "", ""
			kept = append(kept, j)
		}
	}
	return s.toJobs(ctx, kept)
}

// batchJobs reads jobs by pk, strongly consistently, skipping absent ones.
func (s *Store) batchJobs(ctx context.Context, pks []string) ([]*jobItem, error) {
	return s.batchJobsAfter(ctx, pks, 0)
}

// batchJobsAfter is batchJobs keeping finished jobs graceMs past their
// deadline (absentAfter).
func (s *Store) batchJobsAfter(ctx context.Context, pks []string, graceMs int64) ([]*jobItem, error) {
	var out []*jobItem
	err := s.batchGet(ctx, pks, skJob, func(av map[string]types.AttributeValue) error {
		j, err := unmarshalJob(av)
		if err != nil {
			return err
		}
		if !s.absentAfter(j, graceMs) {
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// Seal takes a site's sealed payload: awaiting-payload to ready, with the
// pair's unsealed slot freed in the same transaction.
func (s *Store) Seal(ctx context.Context, in store.SealInput) (store.SealResult, error) {
	pk := jobPK(in.SiteID, in.JobID)
	var env storedEnvelope
	stored := false
	defer func() {
		if !stored {
			s.dropObjects(context.WithoutCancel(ctx), env.s3Key)
		}
	}()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, ok, err := s.readJob(ctx, pk)
		if err != nil {
			return store.SealResult{}, err
		}
		if !ok {
			return store.SealResult{Refused: store.RefusedNotFound}, nil
		}
		// A late seal must not land on a claim that has moved.
		if j.State != string(store.StateAwaitingPayload) {
			return store.SealResult{Refused: store.RefusedTooLate, Was: store.State(j.State)}, nil
		}
		if env.empty() {
			if env, err = s.putEnvelope(ctx, j, "payload", in.Envelope); err != nil {
				return store.SealResult{}, err
			}
		}
		next := *j
		next.Payload, next.PayloadItem, next.PayloadS3 = env.inline, env.item, env.s3Key
		next.State = string(store.StateReady)
		next.AwaitingUntil = 0
		if sealMovesDue(j, s.now()) {
			// index() writes the sealed job's next deadline.
			next.DU = 0
		}
		// Consecutive failures to seal, not a lifetime quota: a job requeued
		// twice for ordinary lease lapses must not be evicted for a payload
		// problem it does not have.
		next.SealAttempts = 0
		// The device may fetch (or complete, or release) before a lost
		// acknowledgement's read-back: the mark still says this call
		// sealed, which, decided again, it would answer too-late (and drop
		// the S3 object the job now names).
		mark := newMark()
		next.SealMark = mark
		out, _, err := s.commit(ctx, jobWrite{pk: pk, put: &next, ver: j.Ver, unsealed: unsealed(j),
			mine: func(j *jobItem) bool { return j.SealMark == mark }})
		if err != nil {
			return store.SealResult{}, err
		}
		if out == committed {
			stored = true
			return store.SealResult{State: store.StateReady}, nil
		}
	}
	return store.SealResult{}, ErrContention
}

// Cancel marks a site's job cancelled. If a runner holds it, the job is
// added to that runner's cancel list in the same transaction, so its next
// heartbeat hears about it.
func (s *Store) Cancel(ctx context.Context, siteID, jobID string) (bool, error) {
	pk := jobPK(siteID, jobID)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, ok, err := s.readJob(ctx, pk)
		if err != nil || !ok {
			return false, err
		}
		if j.Cancelled {
			return true, nil
		}
		next := *j
		next.Cancelled = true
		var extra []types.TransactWriteItem
		if j.claimed() {
			extra = append(extra, s.addCancel(j.Runner, pk))
		}
		out, _, err := s.commit(ctx, jobWrite{pk: pk, put: &next, ver: j.Ver, extra: extra})
		if err != nil {
			return false, err
		}
		if out == committed {
			return true, nil
		}
	}
	return false, ErrContention
}

// CancelRequests names the cancelled jobs the runner holds, done ones
// included. Entries for jobs it no longer holds are dropped: a cancelled job
// is never claimed again, so once a runner's hold on it ended it is over for
// good, and removing the entry cannot race a new one.
func (s *Store) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	out := []protocol.GrantRef{}
	av, err := s.getRaw(ctx, cancelsPK(runnerID), skCancels)
	if err != nil || av == nil {
		return out, err
	}
	pks := getSS(av, "jobs")
	items, err := s.batchJobs(ctx, pks)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	slices.SortFunc(items, func(a, b *jobItem) int { return strings.Compare(a.Seq, b.Seq) })
	for _, j := range items {
		if j.Cancelled && j.claimed() && j.Runner == runnerID {
			held[j.PK] = true
			out = append(out, protocol.GrantRef{JobID: j.JobID, LeaseID: j.Lease})
		}
	}
	var over []string
	for _, pk := range pks {
		if !held[pk] {
			over = append(over, pk)
		}
	}
	if len(over) > 0 {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: key(cancelsPK(runnerID), skCancels),
			UpdateExpression:          aws.String("DELETE jobs :over"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":over": strSet(over...)},
		})
		if err != nil {
			return nil, fmt.Errorf("trim cancel list: %w", err)
		}
	}
	return out, nil
}

// addCancel puts a job on its holder's cancel list, in the cancel's own
// transaction; ADD is idempotent, so a retried transaction cannot repeat it.
func (s *Store) addCancel(runnerID, jobPK string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 &s.table,
		Key:                       key(cancelsPK(runnerID), skCancels),
		UpdateExpression:          aws.String("ADD jobs :j"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":j": strSet(jobPK)},
	}}
}
