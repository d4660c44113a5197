package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// envItem is the at-rest envelope of a job. It is deleted once the job has
// ended (Store.ended); TTL, a day past the envelope's own deadline (no
// device accepts it later), is the backstop for a delete that failed.
type envItem struct {
	PK       string                  `dynamodbav:"pk"`
	SK       string                  `dynamodbav:"sk"`
	Envelope protocol.SealedEnvelope `dynamodbav:"envelope"`
	// Object is the bucket key of an envelope too large to inline
	// (Envelope is then empty); deleted with the item (Store.ended).
	Object string `dynamodbav:"obj,omitempty"`
	TTL    int64  `dynamodbav:"ttl,omitempty"`
}

// envelopeTTL is the TTL of an envelope item: a day past the envelope's
// deadline, or none for an envelope that names none.
func envelopeTTL(e protocol.SealedEnvelope) int64 {
	if e.DeadlineAt <= 0 {
		return 0
	}
	return e.DeadlineAt/1000 + 24*60*60
}

// Create writes the job, its envelope and its dependency edges in one
// transaction conditioned on the job not existing, then re-reads its
// dependencies: a dependency that completed between the first read and the
// write could not see the edge, so the creator must see the completion.
func (s *Store) Create(ctx context.Context, in sitestore.CreateInput) (sitestore.Job, error) {
	if j, found, err := s.Get(ctx, in.ID); err != nil || found {
		return j, err
	}
	stored := envItem{PK: jobPK(in.ID), SK: skEnv, Envelope: in.Envelope, TTL: envelopeTTL(in.Envelope)}
	if len(in.Envelope.Ciphertext) > MaxEnvelopeItemBytes {
		if s.objects == nil {
			return sitestore.Job{}, ErrTooLarge
		}
		k, err := s.offload(ctx, in.ID, in.Envelope)
		if err != nil {
			return sitestore.Job{}, err
		}
		stored.Envelope, stored.Object = protocol.SealedEnvelope{}, k
	}
	j, err := s.create(ctx, in, stored)
	if err != nil || j.Envelope.Ciphertext != in.Envelope.Ciphertext {
		// This create wrote nothing, or another create of the id won: the
		// object, if any, is nobody's.
		s.dropObject(context.WithoutCancel(ctx), stored.Object)
	}
	return j, err
}

// create is Create once the envelope is placed: stored is its item.
func (s *Store) create(ctx context.Context, in sitestore.CreateInput, stored envItem) (sitestore.Job, error) {
	deps := slices.Compact(slices.Sorted(slices.Values(in.DependsOn)))
	ok, err := s.allOK(ctx, deps)
	if err != nil {
		return sitestore.Job{}, err
	}
	j := sitestore.NewJob(in, !ok, s.now(), s.defaultTTL)
	item, err := itemOf(j, 1, "create", false, s.dueShards, s.retention)
	if err != nil {
		return sitestore.Job{}, err
	}
	env, err := attributevalue.MarshalMap(stored)
	if err != nil {
		return sitestore.Job{}, err
	}
	writes := []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		{Put: &types.Put{TableName: &s.table, Item: env}},
	}
	for _, d := range deps {
		writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: key(depPK(d), jobPK(j.ID))}})
	}
	if _, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: writes}); err != nil {
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) {
			// Another create of this id won (or is winning): answer with
			// the stored job, as an idempotent create does.
			if got, found, gerr := s.Get(ctx, j.ID); gerr != nil || found {
				return got, gerr
			}
			return sitestore.Job{}, fmt.Errorf("create job %s: %w", j.ID, sitestore.ErrContention)
		}
		return sitestore.Job{}, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	s.watchers.Notify(j.ID)
	if j.ClaimableAt == 0 {
		if unblocked, err := s.unblock(ctx, j.ID); err != nil {
			return sitestore.Job{}, err
		} else if unblocked != nil {
			j = *unblocked
		}
	}
	j.Envelope = in.Envelope
	return j, nil
}

// Get reads a job and its envelope in one consistent query.
func (s *Store) Get(ctx context.Context, id string) (sitestore.Job, bool, error) {
	for attempt := 0; ; attempt++ {
		j, found, object, err := s.getItems(ctx, id)
		if err != nil || object == "" {
			return j, found, err
		}
		j.Envelope, err = s.fetchObject(ctx, object)
		if errors.Is(err, objects.ErrNotFound) && attempt < 2 {
			// The object goes only after the job's end committed (ended),
			// so the job ended between the read and the fetch: read again,
			// and the ended job carries no envelope.
			continue
		}
		if err != nil {
			return sitestore.Job{}, false, fmt.Errorf("get job %s: %w", id, err)
		}
		return j, found, nil
	}
}

// getItems reads a job's items: the job with its inline envelope, or the
// key of its offloaded envelope's object for Get to fetch. An ended job
// carries no envelope, as after ended has deleted it: between the ending
// write and that delete the items may still be there.
func (s *Store) getItems(ctx context.Context, id string) (j sitestore.Job, found bool, object string, err error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: jobPK(id)}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return sitestore.Job{}, false, "", fmt.Errorf("get job %s: %w", id, err)
	}
	var env envItem
	for _, av := range out.Items {
		switch sk := av["sk"].(*types.AttributeValueMemberS); {
		case sk != nil && sk.Value == skJob:
			st, err := decodeJob(av)
			if err != nil {
				return sitestore.Job{}, false, "", err
			}
			j, found = st.job, true
		case sk != nil && sk.Value == skEnv:
			if err := attributevalue.UnmarshalMap(av, &env); err != nil {
				return sitestore.Job{}, false, "", err
			}
		}
	}
	if !found || j.Ended() {
		return j, found, "", nil
	}
	j.Envelope = env.Envelope
	return j, found, env.Object, nil
}

// Refresh writes what is due for this job, then reads it.
func (s *Store) Refresh(ctx context.Context, id string) (sitestore.Job, bool, error) {
	if _, _, err := s.apply(ctx, id, nil, sitestore.ExpireJob, false); err != nil {
		return sitestore.Job{}, false, err
	}
	return s.Get(ctx, id)
}

// Claim grants from the claimable index, oldest first, after a bounded
// in-line sweep.
func (s *Store) Claim(ctx context.Context, in sitestore.ClaimInput) ([]sitestore.Job, error) {
	if in.Max <= 0 {
		return []sitestore.Job{}, nil
	}
	now := s.now()
	if _, err := s.sweepInline(ctx, now); err != nil {
		return nil, err
	}
	upto := claimKey(now, "~")
	// Only two partitions can hold a job this runner may take: its owner's
	// private jobs and the team jobs. Another owner's private queue is
	// never read.
	queues := []*cursor{
		{s: s, pk: "Q#P#" + in.RunnerOwner, upto: upto},
		{s: s, pk: "Q#T", upto: upto},
	}
	out := []sitestore.Job{}
	scanned := 0
	for len(out) < in.Max && scanned < claimScanLimit {
		next, err := earliest(ctx, queues)
		if err != nil {
			return nil, err
		}
		if next == nil {
			break
		}
		scanned++
		var granted bool
		j, _, err := s.apply(ctx, next.job.ID, next, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
			granted = false
			// What a full sweep would have done first: a job past its TTL
			// or deadline is expired, never granted.
			j, expired := sitestore.ExpireJob(j, now)
			if !sitestore.Claimable(j, in, now) {
				return j, expired
			}
			granted = true
			return sitestore.Grant(j, in.RunnerID, sitestore.NewID(), in.LeaseMs, now), true
		}, false)
		if err != nil {
			return nil, err
		}
		if granted {
			out = append(out, j)
		}
	}
	return out, nil
}

// cursor pages through one claimable partition in claim order.
type cursor struct {
	s     *Store
	pk    string
	upto  string
	buf   []stored
	start map[string]types.AttributeValue
	done  bool
}

func (c *cursor) peek(ctx context.Context) (*stored, error) {
	for len(c.buf) == 0 && !c.done {
		out, err := c.s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &c.s.table,
			IndexName:              aws.String("claimable"),
			KeyConditionExpression: aws.String("qpk = :p AND qsk <= :u"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":p": &types.AttributeValueMemberS{Value: c.pk},
				":u": &types.AttributeValueMemberS{Value: c.upto},
			},
			ExclusiveStartKey: c.start,
			Limit:             aws.Int32(50),
		})
		if err != nil {
			return nil, fmt.Errorf("claimable %s: %w", c.pk, err)
		}
		for _, av := range out.Items {
			st, err := decodeJob(av)
			if err != nil {
				return nil, err
			}
			c.buf = append(c.buf, st)
		}
		c.start = out.LastEvaluatedKey
		c.done = c.start == nil
	}
	if len(c.buf) == 0 {
		return nil, nil
	}
	return &c.buf[0], nil
}

// earliest pops the candidate that comes first in claim order across the
// cursors.
func earliest(ctx context.Context, cs []*cursor) (*stored, error) {
	var best *cursor
	var bestKey string
	for _, c := range cs {
		st, err := c.peek(ctx)
		if err != nil {
			return nil, err
		}
		if st == nil {
			continue
		}
		if k := claimKey(st.job.ClaimableAt, st.job.ID); best == nil || k < bestKey {
			best, bestKey = c, k
		}
	}
	if best == nil {
		return nil, nil
	}
	st := best.buf[0]
	best.buf = best.buf[1:]
	return &st, nil
}

// RenewLeases renews after a bounded sweep, and judges each lease as a
// full sweep would have left it: a lapsed lease is lost, not renewed.
func (s *Store) RenewLeases(ctx context.Context, in sitestore.RenewInput) (sitestore.RenewResult, error) {
	if _, err := s.sweepInline(ctx, s.now()); err != nil {
		return sitestore.RenewResult{}, err
	}
	res := sitestore.RenewResult{Renewed: []sitestore.Renewed{}, Lost: []protocol.GrantRef{}}
	for _, g := range in.Leases {
		var renewed bool
		j, _, err := s.apply(ctx, g.JobID, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
			j, expired := sitestore.ExpireJob(j, now)
			next, ok := sitestore.Renew(j, in.RunnerID, g.LeaseID, in.LeaseMs, now)
			renewed = ok
			return next, ok || expired
		}, false)
		if err != nil {
			return sitestore.RenewResult{}, err
		}
		if !renewed {
			res.Lost = append(res.Lost, g)
			continue
		}
		res.Renewed = append(res.Renewed, sitestore.Renewed{JobID: j.ID, ExpiresAt: j.Lease.ExpiresAt})
	}
	return res, nil
}

// Adopt records a relay's lease.
func (s *Store) Adopt(ctx context.Context, in sitestore.AdoptInput) (sitestore.Job, bool, error) {
	var adopted bool
	j, _, err := s.apply(ctx, in.JobID, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		next, ok := sitestore.Adopt(j, in.LeaseID, in.ExpiresAt, now)
		adopted = ok
		return next, ok
	}, false)
	if err != nil || !adopted {
		return sitestore.Job{}, false, err
	}
	return j, true, nil
}

// Complete records a result; on ok it tells the dependents.
func (s *Store) Complete(ctx context.Context, in sitestore.CompleteInput) (sitestore.CompleteResult, error) {
	var res sitestore.CompleteResult
	_, found, err := s.apply(ctx, in.JobID, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		next, r, write := sitestore.CompleteJob(j, in, now)
		res = r
		return next, write
	}, true)
	if err != nil || !found {
		return sitestore.CompleteResult{}, err
	}
	if res.Accepted && res.Job.State == sitestore.StateOK {
		if err := s.tellDependents(ctx, in.JobID); err != nil {
			return sitestore.CompleteResult{}, err
		}
	}
	return res, nil
}

// Release requeues the named grants.
func (s *Store) Release(ctx context.Context, in sitestore.ReleaseInput) ([]string, error) {
	released := []string{}
	for _, g := range in.Leases {
		var ok bool
		_, _, err := s.apply(ctx, g.JobID, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
			next, done := sitestore.Release(j, in.RunnerID, g.LeaseID, in.Reason, now)
			ok = done
			return next, done
		}, false)
		if err != nil {
			return nil, err
		}
		if ok {
			released = append(released, g.JobID)
		}
	}
	return released, nil
}

// Cancel cancels or requests cancellation.
func (s *Store) Cancel(ctx context.Context, id string) (sitestore.Job, bool, error) {
	return s.apply(ctx, id, nil, sitestore.Cancel, false)
}

// held reads the jobs a runner holds from the group index.
func (s *Store) held(ctx context.Context, runnerID string) ([]sitestore.Job, error) {
	var out []sitestore.Job
	err := s.queryGroup(ctx, heldPK(runnerID), "", func(av map[string]types.AttributeValue) error {
		st, err := decodeJob(av)
		if err != nil {
			return err
		}
		if sitestore.HeldBy(st.job, runnerID) {
			out = append(out, st.job)
		}
		return nil
	})
	return out, err
}

// CancelRequests names the cancel requests on the runner's grants.
func (s *Store) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	jobs, err := s.held(ctx, runnerID)
	if err != nil {
		return nil, err
	}
	out := []protocol.GrantRef{}
	for _, j := range jobs {
		if g, ok := sitestore.CancelRequestOf(j, runnerID); ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// ClaimedBy lists the runner's held jobs.
func (s *Store) ClaimedBy(ctx context.Context, runnerID string) ([]sitestore.Job, error) {
	return s.held(ctx, runnerID)
}

// queryGroup pages through one partition of the group index.
func (s *Store) queryGroup(ctx context.Context, pk, prefix string, each func(map[string]types.AttributeValue) error) error {
	cond := "gpk = :p"
	vals := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}}
	if prefix != "" {
		cond += " AND begins_with(gsk, :g)"
		vals[":g"] = &types.AttributeValueMemberS{Value: prefix}
	}
	in := &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String("group"),
		KeyConditionExpression: aws.String(cond), ExpressionAttributeValues: vals}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("group %s: %w", pk, err)
		}
		for _, av := range out.Items {
			if err := each(av); err != nil {
				return err
			}
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// MarkPublished records the relay's acceptance of the stub.
func (s *Store) MarkPublished(ctx context.Context, id string) (sitestore.Job, bool, error) {
	return s.applyOne(ctx, id, sitestore.MarkPublished)
}

// Unpublished reads the sparse UNPUBLISHED partition of the group index.
func (s *Store) Unpublished(ctx context.Context) ([]sitestore.Job, error) {
	out := []sitestore.Job{}
	err := s.queryGroup(ctx, unpublishedPK, "", func(av map[string]types.AttributeValue) error {
		st, err := decodeJob(av)
		if err != nil {
			return err
		}
		// The index lags the table: judge the copy again.
		if st.job.NeedsPublish() {
			out = append(out, st.job)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b sitestore.Job) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return out, err
}

// SealTo adopts the relay's lease and records the device, write-ahead.
func (s *Store) SealTo(ctx context.Context, in sitestore.SealToInput) (sitestore.Job, bool, error) {
	return s.applyOne(ctx, in.JobID, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		return sitestore.SealTo(j, in, now)
	})
}

// End ends a live job without a device's result.
func (s *Store) End(ctx context.Context, in sitestore.EndInput) (sitestore.Job, bool, error) {
	return s.applyOne(ctx, in.JobID, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		return sitestore.EndJob(j, in.Outcome, in.Reason, now)
	})
}

// applyOne applies a rule after what is due for the job, and reports
// whether the rule changed it (an expiry alone is written, not reported).
func (s *Store) applyOne(ctx context.Context, id string, r func(sitestore.Job, int64) (sitestore.Job, bool)) (sitestore.Job, bool, error) {
	var applied bool
	j, found, err := s.apply(ctx, id, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		j, expired := sitestore.ExpireJob(j, now)
		j, applied = r(j, now)
		return j, expired || applied
	}, false)
	if err != nil || !found {
		return sitestore.Job{}, false, err
	}
	return j, applied, nil
}
