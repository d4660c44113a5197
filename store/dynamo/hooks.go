package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// WriteRawStub overwrites the stored stub of (siteID, jobID) with raw
// bytes, the way a row written by another version looks. A test hook: the
// claim must skip a stub it cannot decode and leave it queued.
func (s *Store) WriteRawStub(ctx context.Context, siteID, jobID string, raw []byte) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       key(jobPK(siteID, jobID), skJob),
		UpdateExpression:          aws.String("SET stub = :s"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": str(string(raw))},
	})
	if err != nil {
		return fmt.Errorf("write raw stub: %w", err)
	}
	return nil
}
