package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
)

// allOK reads every dependency consistently and reports whether all are ok
// (an unknown one is not).
func (s *Store) allOK(ctx context.Context, deps []string) (bool, error) {
	for start := 0; start < len(deps); start += 100 {
		batch := deps[start:min(start+100, len(deps))]
		keys := make([]map[string]types.AttributeValue, 0, len(batch))
		for _, d := range batch {
			keys = append(keys, key(jobPK(d), skJob))
		}
		req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		okCount := 0
		for len(req) > 0 {
			out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return false, fmt.Errorf("read dependencies: %w", err)
			}
			for _, av := range out.Responses[s.table] {
				st, err := decodeJob(av)
				if err != nil {
					return false, err
				}
				if st.job.State != sitestore.StateOK {
					return false, nil
				}
				okCount++
			}
			req = out.UnprocessedKeys
		}
		if okCount != len(batch) {
			return false, nil
		}
	}
	return true, nil
}

// unblock sets claimableAt on a blocked job whose dependencies are all ok,
// once; it returns the job if this call unblocked it.
func (s *Store) unblock(ctx context.Context, id string) (*sitestore.Job, error) {
	st, found, err := s.readJob(ctx, id)
	if err != nil || !found || st.job.ClaimableAt != 0 {
		return nil, err
	}
	ok, err := s.allOK(ctx, st.job.DependsOn)
	if err != nil || !ok {
		return nil, err
	}
	// Dependencies only ever move to ok and stay there, so "all ok" read
	// once stays true through the retries.
	var done bool
	j, _, err := s.apply(ctx, id, &st, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
		next, changed := sitestore.Unblock(j, func(string) bool { return true }, now)
		done = changed
		return next, changed
	}, false)
	if err != nil || !done {
		return nil, err
	}
	return &j, nil
}

// tellDependents unblocks what a job completed ok was blocking, then clears
// its UNBLOCK marker. Idempotent: the sweep re-runs it for a completer that
// died half way.
func (s *Store) tellDependents(ctx context.Context, id string) error {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: depPK(id)}},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("dependents of %s: %w", id, err)
		}
		for _, av := range out.Items {
			sk, _ := av["sk"].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			if _, err := s.unblock(ctx, strings.TrimPrefix(sk.Value, "JOB#")); err != nil {
				return err
			}
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       key(jobPK(id), skJob),
		UpdateExpression:          aws.String("REMOVE dpk, dsk"),
		ConditionExpression:       aws.String("begins_with(dpk, :u)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": &types.AttributeValueMemberS{Value: unblockPK}},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("clear unblock marker of %s: %w", id, err)
	}
	return nil
}
