package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/ddb"
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
			ddb.Attribute("pk", types.ScalarAttributeTypeS),
			ddb.Attribute("sk", types.ScalarAttributeTypeS),
			ddb.Attribute("qk", types.ScalarAttributeTypeS),
			ddb.Attribute("lk", types.ScalarAttributeTypeS),
			ddb.Attribute("seq", types.ScalarAttributeTypeS),
			ddb.Attribute("dk", types.ScalarAttributeTypeS),
			ddb.Attribute("du", types.ScalarAttributeTypeN),
		},
		KeySchema: ddb.KeySchema("pk", "sk"),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			// Claimable jobs, oldest first; sparse (only queued jobs carry qk).
			ddb.GSI("queue", "qk", "seq", types.ProjectionTypeAll),
			// A site's awaiting-payload and done jobs; sparse.
			ddb.GSI("sitelist", "lk", "seq", types.ProjectionTypeKeysOnly),
			// Jobs by their next deadline, over a few shards.
			ddb.GSI("due", "dk", "du", types.ProjectionTypeKeysOnly),
		},
	}
}

// TableCreator is what CreateTable needs from a DynamoDB client; a
// *dynamodb.Client satisfies it. It is the platform's, named here for
// importers.
type TableCreator = ddb.TableCreator

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
