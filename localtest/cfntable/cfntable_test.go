package cfntable

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const template = `
Transform: AWS::Serverless-2016-10-31
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          TABLE: !Ref Table
          ARN: !GetAtt Table.Arn
  Table:
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
      TimeToLiveSpecification:
        AttributeName: ttl
        Enabled: true
Outputs:
  Name:
    Value: !Ref Table
`

// TestCloudFormationTagsAreTolerated: short-form intrinsic functions
// anywhere in the template, the table included, do not stop the table from
// being read.
func TestCloudFormationTagsAreTolerated(t *testing.T) {
	tbl, err := FromTemplate([]byte(template), "Table")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Input.BillingMode != types.BillingModePayPerRequest || len(tbl.Input.KeySchema) != 1 || tbl.TTL != "ttl" {
		t.Errorf("read %+v, ttl %q", tbl.Input, tbl.TTL)
	}
	if _, err := FromTemplate([]byte("Resources: {}\n"), "Table"); err == nil {
		t.Error("a template without the table was accepted")
	}
}

// TestCheckFindsEveryDifference: an extra attribute, a different TTL and an
// unread property are each reported, and the same table passes.
func TestCheckFindsEveryDifference(t *testing.T) {
	tbl, err := FromTemplate([]byte(template), "Table")
	if err != nil {
		t.Fatal(err)
	}
	same := *tbl.Input
	same.TableName = aws.String("any name")
	if err := tbl.Check(&same, "ttl"); err != nil {
		t.Errorf("the same table: %v", err)
	}
	if err := tbl.Check(&same, ""); err == nil {
		t.Error("TTL off was not reported")
	}
	extra := same
	extra.AttributeDefinitions = append(extra.AttributeDefinitions[:1:1], types.AttributeDefinition{
		AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS,
	})
	if err := tbl.Check(&extra, "ttl"); err == nil {
		t.Error("an extra attribute was not reported")
	}
	unread := strings.Replace(template, "      BillingMode:", "      ContributorInsightsSpecification:\n        Enabled: true\n      BillingMode:", 1)
	if _, err := FromTemplate([]byte(unread), "Table"); err == nil {
		t.Error("a property the Go definitions would miss was accepted")
	}
}
