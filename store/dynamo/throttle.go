package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// throttlePK is one token bucket: T#<bucket>. Bucket names are the relay's
// own (a source address or a key id behind a prefix), short and bounded.
func throttlePK(bucket string) string { return "T#" + bucket }

const skThrottle = "T"

// TakeToken takes one token from the named bucket: a read, then a put
// conditioned on the version read, so two replicas cannot both spend the
// last token. The item expires once the bucket would be full again, so a
// source that asked once costs nothing after.
//
// A bucket whose writes keep losing is being written by many requests at
// once, which is the flood it exists to stop: after maxAttempts it answers
// "no token" rather than contention, so the flood is throttled, not told
// to retry.
func (s *Store) TakeToken(ctx context.Context, bucket string, burst, refillMs int64) (bool, error) {
	pk := throttlePK(bucket)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		av, err := s.getRaw(ctx, pk, skThrottle)
		if err != nil {
			return false, fmt.Errorf("read throttle bucket: %w", err)
		}
		now := s.now()
		ver := getN(av, "ver")
		next, ok := store.Bucket{Tokens: getN(av, "tok"), At: getN(av, "at")}.Take(now, burst, refillMs)
		if av != nil && !ok {
			// Nothing to write: an empty bucket stays as it is, and a
			// refused flood costs a read, not a write.
			return false, nil
		}
		fullAt := next.At + (burst-next.Tokens)*refillMs
		put := &dynamodb.PutItemInput{TableName: &s.table, Item: map[string]types.AttributeValue{
			"pk": str(pk), "sk": str(skThrottle), "tok": num(next.Tokens), "at": num(next.At),
			"ver": num(ver + 1), "ttl": num(fullAt/1000 + 60),
		}}
		if av == nil {
			put.ConditionExpression = aws.String("attribute_not_exists(pk)")
		} else {
			put.ConditionExpression = aws.String("ver = :v")
			put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(ver)}
		}
		_, err = s.db.PutItem(ctx, put)
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("write throttle bucket: %w", err)
		}
		return ok, nil
	}
	return false, nil
}
