package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// ckptItem is the durable checkpoint of one lease's stream of a job: the
// job's checkpoints share a partition of their own (checkpointPK), one
// item per lease (checkpointSK), apart from the job's partition so that
// Get, which reads the whole job partition, never pays for a checkpoint,
// and so that a checkpoint write is not heard by Subscribe as a job
// change. Keyed by lease because a stream belongs to its lease: a re-run
// under another lease writes its own item and never replaces this one.
// A job has at most one item per relay grant the site sealed. TTL is the
// envelope item's: the backstop that drops it after the job.
type ckptItem struct {
	PK       string                  `dynamodbav:"pk"`
	SK       string                  `dynamodbav:"sk"`
	Seq      int64                   `dynamodbav:"seq"`
	Envelope protocol.SealedEnvelope `dynamodbav:"envelope"`
	TTL      int64                   `dynamodbav:"ttl,omitempty"`
}

func checkpointPK(jobID string) string   { return "CKPT#" + jobID }
func checkpointSK(leaseID string) string { return "LEASE#" + leaseID }

// PutCheckpoint is one PutItem conditioned on no checkpoint or a lower
// seq for the same job and lease: the compare-and-set that keeps a stale
// writer from rolling it back.
func (s *Store) PutCheckpoint(ctx context.Context, jobID, leaseID string, cp sitestore.Checkpoint) (bool, error) {
	if jobID == "" || leaseID == "" || cp.Seq < 1 {
		return false, sitestore.ErrBadCheckpoint
	}
	item, err := attributevalue.MarshalMap(ckptItem{PK: checkpointPK(jobID), SK: checkpointSK(leaseID), Seq: cp.Seq,
		Envelope: cp.Envelope, TTL: envelopeTTL(cp.Envelope)})
	if err != nil {
		return false, err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 &s.table,
		Item:                      item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR seq < :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberN{Value: fmt.Sprint(cp.Seq)}},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("put checkpoint %s: %w", jobID, err)
	}
	return true, nil
}

// Checkpoint reads the checkpoint of a job's stream under a lease,
// strongly consistent.
func (s *Store) Checkpoint(ctx context.Context, jobID, leaseID string) (sitestore.Checkpoint, bool, error) {
	if jobID == "" || leaseID == "" {
		return sitestore.Checkpoint{}, false, nil
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table,
		Key: key(checkpointPK(jobID), checkpointSK(leaseID)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return sitestore.Checkpoint{}, false, fmt.Errorf("get checkpoint %s: %w", jobID, err)
	}
	if out.Item == nil {
		return sitestore.Checkpoint{}, false, nil
	}
	var it ckptItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return sitestore.Checkpoint{}, false, err
	}
	return sitestore.Checkpoint{Seq: it.Seq, Envelope: it.Envelope}, true, nil
}
