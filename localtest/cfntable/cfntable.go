// Package cfntable reads an AWS::DynamoDB::Table resource out of a SAM
// template as a CreateTable input. Tests use it to hold the stores' table
// definitions, which are Go values so that deployed functions link no YAML
// parser, equal to what CloudFormation deploys.
package cfntable

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"
)

// Table is what a template's table resource creates: the CreateTable input
// (named "", the template names no table) and the TTL attribute ("" when
// TTL is off).
type Table struct {
	Input *dynamodb.CreateTableInput
	TTL   string
}

// serviceOnly are table properties DynamoDB Local does not model, so the
// Go definitions leave them to the template. Any other property must be
// read below: an unknown one is an error, so a property added to the
// template cannot be silently missing from the Go definition.
var serviceOnly = map[string]bool{
	"PointInTimeRecoverySpecification": true,
	"SSESpecification":                 true,
	"TableName":                        true,
	"Tags":                             true,
	"DeletionProtectionEnabled":        true,
}

type properties struct {
	BillingMode          string `yaml:"BillingMode"`
	AttributeDefinitions []struct {
		AttributeName string `yaml:"AttributeName"`
		AttributeType string `yaml:"AttributeType"`
	} `yaml:"AttributeDefinitions"`
	KeySchema              []key `yaml:"KeySchema"`
	GlobalSecondaryIndexes []struct {
		IndexName  string `yaml:"IndexName"`
		KeySchema  []key  `yaml:"KeySchema"`
		Projection struct {
			ProjectionType   string   `yaml:"ProjectionType"`
			NonKeyAttributes []string `yaml:"NonKeyAttributes"`
		} `yaml:"Projection"`
	} `yaml:"GlobalSecondaryIndexes"`
	TimeToLiveSpecification struct {
		AttributeName string `yaml:"AttributeName"`
		Enabled       bool   `yaml:"Enabled"`
	} `yaml:"TimeToLiveSpecification"`
	StreamSpecification *struct {
		StreamViewType string `yaml:"StreamViewType"`
	} `yaml:"StreamSpecification"`
}

type key struct {
	AttributeName string `yaml:"AttributeName"`
	KeyType       string `yaml:"KeyType"`
}

// FromTemplate reads Resources.<resource>.Properties of template. It walks
// yaml.Nodes rather than decoding the whole document, because
// CloudFormation's short-form tags (!Ref, !Sub, !GetAtt) are opaque to a
// YAML library and may appear anywhere outside the table.
func FromTemplate(template []byte, resource string) (Table, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(template, &doc); err != nil {
		return Table{}, fmt.Errorf("parse template: %w", err)
	}
	if len(doc.Content) == 0 {
		return Table{}, errors.New("template is empty")
	}
	node := doc.Content[0]
	for _, k := range []string{"Resources", resource, "Properties"} {
		node = mapValue(node, k)
		if node == nil {
			return Table{}, fmt.Errorf("template has no Resources.%s.Properties (missing %s)", resource, k)
		}
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		name := node.Content[i].Value
		switch name {
		case "BillingMode", "AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes", "TimeToLiveSpecification", "StreamSpecification":
		default:
			if !serviceOnly[name] {
				return Table{}, fmt.Errorf("%s has property %s, which cfntable does not read", resource, name)
			}
		}
	}
	var props properties
	if err := node.Decode(&props); err != nil {
		return Table{}, fmt.Errorf("decode %s properties: %w", resource, err)
	}
	if len(props.KeySchema) == 0 {
		return Table{}, fmt.Errorf("%s has no KeySchema", resource)
	}
	in := &dynamodb.CreateTableInput{
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
	if st := props.StreamSpecification; st != nil {
		in.StreamSpecification = &types.StreamSpecification{
			StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(st.StreamViewType),
		}
	}
	t := Table{Input: in}
	if props.TimeToLiveSpecification.Enabled {
		t.TTL = props.TimeToLiveSpecification.AttributeName
	}
	return t, nil
}

// Check says how the table a Go definition creates (in, whatever its name,
// with TTL on ttl, "" for off) differs from t, or nil when it is the same
// table: same attribute definitions, key schema, indexes (in order, with
// their projections), billing mode, stream and TTL.
func (t Table) Check(in *dynamodb.CreateTableInput, ttl string) error {
	code := *in
	code.TableName = nil
	want, err := json.MarshalIndent(t.Input, "", " ")
	if err != nil {
		return err
	}
	got, err := json.MarshalIndent(&code, "", " ")
	if err != nil {
		return err
	}
	if string(got) != string(want) {
		return fmt.Errorf("the Go definition creates\n%s\nthe template\n%s", got, want)
	}
	if ttl != t.TTL {
		return fmt.Errorf("the Go definition's TTL attribute is %q, the template's %q", ttl, t.TTL)
	}
	return nil
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

func keySchema(keys []key) []types.KeySchemaElement {
	out := make([]types.KeySchemaElement, 0, len(keys))
	for _, k := range keys {
		out = append(out, types.KeySchemaElement{
			AttributeName: aws.String(k.AttributeName),
			KeyType:       types.KeyType(k.KeyType),
		})
	}
	return out
}
