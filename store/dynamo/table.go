package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
)

// tableResource is the logical id of the routing table in template.yaml.
const tableResource = "RoutingTable"

// cfnTable is the part of an AWS::DynamoDB::Table's properties that shapes
// the table. Properties only the service honours (PITR, SSE) are left out:
// DynamoDB Local does not model them.
type cfnTable struct {
	BillingMode          string `yaml:"BillingMode"`
	AttributeDefinitions []struct {
		AttributeName string `yaml:"AttributeName"`
		AttributeType string `yaml:"AttributeType"`
	} `yaml:"AttributeDefinitions"`
	KeySchema              []cfnKey `yaml:"KeySchema"`
	GlobalSecondaryIndexes []struct {
		IndexName  string   `yaml:"IndexName"`
		KeySchema  []cfnKey `yaml:"KeySchema"`
		Projection struct {
			ProjectionType   string   `yaml:"ProjectionType"`
			NonKeyAttributes []string `yaml:"NonKeyAttributes"`
		} `yaml:"Projection"`
	} `yaml:"GlobalSecondaryIndexes"`
	TimeToLiveSpecification struct {
		AttributeName string `yaml:"AttributeName"`
		Enabled       bool   `yaml:"Enabled"`
	} `yaml:"TimeToLiveSpecification"`
}

type cfnKey struct {
	AttributeName string `yaml:"AttributeName"`
	KeyType       string `yaml:"KeyType"`
}

// tableInput derives the CreateTable input for a table named name from the
// RoutingTable resource in template.yaml, so tests, local runs and the
// deployed stack share one definition.
func tableInput(name string) (*dynamodb.CreateTableInput, error) {
	return tableInputFrom(byorelay.Template, tableResource, name)
}

// tableInputFrom is tableInput for the table resource of any template.
func tableInputFrom(template []byte, resource, name string) (*dynamodb.CreateTableInput, error) {
	props, err := tableProperties(template, resource)
	if err != nil {
		return nil, err
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingMode(props.BillingMode),
		KeySchema:   keySchema(props.KeySchema),
	}
	for _, a := range props.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(a.AttributeName),
			AttributeType: types.ScalarAttributeType(a.AttributeType),
		})
	}
	for _, g := range props.GlobalSecondaryIndexes {
		p := &types.Projection{ProjectionType: types.ProjectionType(g.Projection.ProjectionType)}
		if len(g.Projection.NonKeyAttributes) > 0 {
			p.NonKeyAttributes = g.Projection.NonKeyAttributes
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName:  aws.String(g.IndexName),
			KeySchema:  keySchema(g.KeySchema),
			Projection: p,
		})
	}
	return in, nil
}

// ttlAttribute is the TTL attribute the template declares, or "" if none.
func ttlAttribute(template []byte, resource string) (string, error) {
	props, err := tableProperties(template, resource)
	if err != nil {
		return "", err
	}
	if !props.TimeToLiveSpecification.Enabled {
		return "", nil
	}
	return props.TimeToLiveSpecification.AttributeName, nil
}

// TableCreator is what CreateTable needs from a DynamoDB client.
type TableCreator interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// CreateTable creates the routing table as template.yaml defines it and
// turns on TTL. It is for tests and local runs; a deployment gets the table
// from CloudFormation. TTL only collects garbage (every read checks
// deadlines itself), so a local service that refuses the TTL call is not an
// error.
func CreateTable(ctx context.Context, api TableCreator, name string) error {
	return CreateTableFrom(ctx, api, byorelay.Template, tableResource, name)
}

// CreateTableFrom is CreateTable for the AWS::DynamoDB::Table resource of
// another template (the site's), so every table has one definition.
func CreateTableFrom(ctx context.Context, api TableCreator, template []byte, resource, name string) error {
	in, err := tableInputFrom(template, resource, name)
	if err != nil {
		return err
	}
	if _, err := api.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	attr, err := ttlAttribute(template, resource)
	if err != nil || attr == "" {
		return err
	}
	_, _ = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attr),
			Enabled:       aws.Bool(true),
		},
	})
	return nil
}

// tableProperties finds Resources.RoutingTable.Properties in a template.
// It walks yaml.Nodes rather than decoding the whole document, because
// CloudFormation's short-form tags (!Ref, !Sub, !GetAtt) are opaque to a
// YAML library and may appear anywhere outside the table.
func tableProperties(template []byte, tableResource string) (cfnTable, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(template, &doc); err != nil {
		return cfnTable{}, fmt.Errorf("parse template.yaml: %w", err)
	}
	if len(doc.Content) == 0 {
		return cfnTable{}, errors.New("template.yaml is empty")
	}
	node := doc.Content[0]
	for _, key := range []string{"Resources", tableResource, "Properties"} {
		node = mapValue(node, key)
		if node == nil {
			return cfnTable{}, fmt.Errorf("template.yaml has no Resources.%s.Properties (missing %s)", tableResource, key)
		}
	}
	var props cfnTable
	if err := node.Decode(&props); err != nil {
		return cfnTable{}, fmt.Errorf("decode %s properties: %w", tableResource, err)
	}
	if len(props.KeySchema) == 0 {
		return cfnTable{}, fmt.Errorf("%s has no KeySchema", tableResource)
	}
	return props, nil
}

func mapValue(node *yaml.Node, key string) *yaml.Node {
	if node.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			return node.Content[i+1]
		}
	}
	return nil
}

func keySchema(keys []cfnKey) []types.KeySchemaElement {
	out := make([]types.KeySchemaElement, 0, len(keys))
	for _, k := range keys {
		out = append(out, types.KeySchemaElement{
			AttributeName: aws.String(k.AttributeName),
			KeyType:       types.KeyType(k.KeyType),
		})
	}
	return out
}
