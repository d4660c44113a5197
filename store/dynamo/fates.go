package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// evictionNotice is the item a sweep writes, in the eviction's own
// transaction, for the site to read through Evicted. It carries the job's
// deadline and TTL: past the deadline there is nothing left to tell.
func (s *Store) evictionNotice(j *jobItem) (types.TransactWriteItem, error) {
	item := map[string]types.AttributeValue{
		"pk":    str(evictedPK(j.Site, j.JobID)),
		"sk":    str(skEvicted),
		"site":  str(j.Site),
		"jobId": str(j.JobID),
		"dl":    num(j.Deadline),
		"ttl":   num(j.Deadline/1000 + ttlGraceSeconds),
		"lk":    str(siteListKey(j.Site, evictedList)),
		"seq":   str(j.Seq),
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: item}}, nil
}

// Evicted lists the site's eviction notices from the sitelist index, reads
// them back consistently (the index lags, and a collected notice must not
// come back), and leaves out those past their deadline and those whose job
// id is held again.
func (s *Store) Evicted(ctx context.Context, siteID string) ([]string, error) {
	pks, err := s.siteListKeys(ctx, siteID, evictedList)
	if err != nil || len(pks) == 0 {
		return []string{}, err
	}
	now := s.now()
	var ids []string
	if err := s.batchGet(ctx, pks, skEvicted, func(av map[string]types.AttributeValue) error {
		if getN(av, "dl") > now {
			ids = append(ids, getS(av, "jobId"))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// A notice whose job id was published again is about a job that no
	// longer exists; the live one must not be reported evicted.
	jobPKs := make([]string, len(ids))
	for i, id := range ids {
		jobPKs[i] = jobPK(siteID, id)
	}
	alive, err := s.batchJobs(ctx, jobPKs)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, j := range alive {
		held[j.JobID] = true
	}
	out := []string{}
	for _, id := range ids {
		if !held[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// Collect marks the site's done jobs among jobIDs collected, each with the
// usual versioned write (a job that changed under it is decided again), and
// deletes the notices of the others. One consistent batch read decides
// which is which, so collecting a list costs a read per hundred ids and a
// write per job that was actually listed.
func (s *Store) Collect(ctx context.Context, siteID string, jobIDs []string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	pks := make([]string, len(jobIDs))
	for i, id := range jobIDs {
		pks[i] = jobPK(siteID, id)
	}
	// A result a collect listed in its grace is collected too.
	items, err := s.batchJobsAfter(ctx, pks, store.ResultGraceMs)
	if err != nil {
		return err
	}
	isJob := map[string]bool{}
	for _, j := range items {
		isJob[j.JobID] = true
		if j.State == string(store.StateDone) && !j.Collected {
			if err := s.collectJob(ctx, j); err != nil {
				return err
			}
		}
	}
	for _, id := range jobIDs {
		if isJob[id] {
			continue
		}
		// Unconditional and idempotent: deleting an absent notice is a no-op.
		if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.table, Key: key(evictedPK(siteID, id), skEvicted),
		}); err != nil {
			return fmt.Errorf("collect eviction notice: %w", err)
		}
	}
	return nil
}

// collectJob sets Collected on a done job, deciding again on a lost race.
func (s *Store) collectJob(ctx context.Context, j *jobItem) error {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if j.State != string(store.StateDone) || j.Collected {
			return nil
		}
		next := *j
		next.Collected = true
		out, _, err := s.commit(ctx, jobWrite{pk: j.PK, put: &next, ver: j.Ver})
		if err != nil || out == committed {
			return err
		}
		var ok bool
		if j, ok, err = s.readJob(ctx, j.PK); err != nil || !ok {
			return err
		}
	}
	return ErrContention
}

// siteListKeys reads the pks of one of a site's lists from the sitelist
// index (keys only).
func (s *Store) siteListKeys(ctx context.Context, siteID, list string) ([]string, error) {
	var pks []string
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 aws.String("sitelist"),
		KeyConditionExpression:    aws.String("lk = :lk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":lk": str(siteListKey(siteID, list))},
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query site list: %w", err)
		}
		for _, av := range out.Items {
			pks = append(pks, getS(av, "pk"))
		}
		if len(out.LastEvaluatedKey) == 0 {
			return pks, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// batchGet reads items (pk, sk) strongly consistently, a hundred at a
// time, handing each present one to each.
func (s *Store) batchGet(ctx context.Context, pks []string, sk string, each func(map[string]types.AttributeValue) error) error {
	for start := 0; start < len(pks); start += 100 {
		keys := make([]map[string]types.AttributeValue, 0, 100)
		for _, pk := range pks[start:min(start+100, len(pks))] {
			keys = append(keys, key(pk, sk))
		}
		req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if attempt >= maxAttempts {
					return fmt.Errorf("batch get %s: %w", sk, ErrContention)
				}
				backoff(ctx, attempt)
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return fmt.Errorf("batch get: %w", err)
			}
			for _, av := range res.Responses[s.table] {
				if err := each(av); err != nil {
					return err
				}
			}
			req = res.UnprocessedKeys
		}
	}
	return nil
}
