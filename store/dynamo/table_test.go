package dynamo

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	byorelay "github.com/byorelay/byorelay"
)

// TestTheTableComesFromTemplateYAML: the table tests create is the one
// template.yaml deploys: keys, on-demand billing, the three sparse indexes
// the store queries, and TTL.
func TestTheTableComesFromTemplateYAML(t *testing.T) {
	in, err := tableInput("t")
	if err != nil {
		t.Fatal(err)
	}
	if in.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing %q", in.BillingMode)
	}
	if len(in.KeySchema) != 2 || aws.ToString(in.KeySchema[0].AttributeName) != "pk" || aws.ToString(in.KeySchema[1].AttributeName) != "sk" {
		t.Errorf("key schema %+v", in.KeySchema)
	}
	var names []string
	for _, g := range in.GlobalSecondaryIndexes {
		names = append(names, aws.ToString(g.IndexName))
	}
	if want := []string{"queue", "sitelist", "due"}; !slices.Equal(names, want) {
		t.Errorf("indexes %v, want %v", names, want)
	}
	if attr, err := ttlAttribute(byorelay.Template, tableResource); err != nil || attr != "ttl" {
		t.Errorf("ttl attribute %q, %v", attr, err)
	}
}

// TestTemplatePropertiesTolerateCloudFormationTags: short-form intrinsic
// functions anywhere in the template, the table included, do not stop the
// table from being read.
func TestTemplatePropertiesTolerateCloudFormationTags(t *testing.T) {
	props, err := tableProperties([]byte(`
Transform: AWS::Serverless-2016-10-31
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          TABLE: !Ref RoutingTable
          ARN: !GetAtt RoutingTable.Arn
  RoutingTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}-routing"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - AttributeName: pk
          AttributeType: S
      KeySchema:
        - AttributeName: pk
          KeyType: HASH
Outputs:
  Name:
    Value: !Ref RoutingTable
`), tableResource)
	if err != nil {
		t.Fatal(err)
	}
	if props.BillingMode != "PAY_PER_REQUEST" || len(props.KeySchema) != 1 {
		t.Errorf("read %+v", props)
	}
	if _, err := tableProperties([]byte("Resources: {}\n"), tableResource); err == nil {
		t.Error("a template without the table was accepted")
	}
}
