package dynamo

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func strSet(v ...string) types.AttributeValue { return &types.AttributeValueMemberSS{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(pk), "sk": str(sk)}
}

func getS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getSS(item map[string]types.AttributeValue, name string) []string {
	if v, ok := item[name].(*types.AttributeValueMemberSS); ok {
		return v.Value
	}
	return nil
}

// getRaw reads one item, strongly consistent; nil when absent.
func (s *Store) getRaw(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: key(pk, sk), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// scanPrefix calls each for every item whose partition key begins with
// prefix, over all pages. A scan: for debug pages and tests, never on a
// request path.
func (s *Store) scanPrefix(ctx context.Context, prefix string, each func(map[string]types.AttributeValue) error) error {
	in := &dynamodb.ScanInput{
		TableName:                 &s.table,
		FilterExpression:          aws.String("begins_with(pk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(prefix)},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		out, err := s.db.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("scan %s items: %w", prefix, err)
		}
		for _, av := range out.Items {
			if err := each(av); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
