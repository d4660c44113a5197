package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ttlAttribute is the routing table's TTL attribute.
const ttlAttribute = "ttl"

// tableInput is the CreateTable input for a routing table named name: the
// RoutingTable resource of template.yaml, written out as Go values so that
// the functions, which import this package, link neither a YAML parser nor
// the template. TestTheTableIsTemplateYAMLs holds the two equal (attributes,
// keys, indexes, billing, TTL), so they cannot drift. Properties only the
// service honours (PITR, SSE) are the template's alone: DynamoDB Local does
// not model them.
func tableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			attribute("pk", types.ScalarAttributeTypeS),
			attribute("sk", types.ScalarAttributeTypeS),
			attribute("qk", types.ScalarAttributeTypeS),
			attribute("lk", types.ScalarAttributeTypeS),
			attribute("seq", types.ScalarAttributeTypeS),
			attribute("dk", types.ScalarAttributeTypeS),
			attribute("du", types.ScalarAttributeTypeN),
		},
		KeySchema: keySchema("pk", "sk"),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			// Claimable jobs, oldest first; sparse (only queued jobs carry qk).
			gsi("queue", "qk", "seq", types.ProjectionTypeAll),
			// A site's awaiting-payload and done jobs; sparse.
			gsi("sitelist", "lk", "seq", types.ProjectionTypeKeysOnly),
			// Jobs by their next deadline, over a few shards.
			gsi("due", "dk", "du", types.ProjectionTypeKeysOnly),
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

func attribute(name string, typ types.ScalarAttributeType) types.AttributeDefinition {
	return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: typ}
}

// TableCreator is what CreateTable needs from a DynamoDB client.
type TableCreator interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// CreateTable creates the routing table (tableInput) and turns on TTL. It
// is for tests and local runs; a deployment gets the table from
// CloudFormation. TTL only collects garbage (every read checks deadlines
// itself), so a local service that refuses the TTL call is not an error.
func CreateTable(ctx context.Context, api TableCreator, name string) error {
	if _, err := api.CreateTable(ctx, tableInput(name)); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	_, _ = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(ttlAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	return nil
}
