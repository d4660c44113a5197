package localtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestMain(m *testing.M) { Main(m) }

// The foundation's proof that tests reach a real DynamoDB Local: a table is
// created, a conditional put succeeds once, and the same put is refused.
func TestDynamoLocalRefusesASecondConditionalWrite(t *testing.T) {
	ctx := context.Background()
	db := DynamoClient(t)
	table := UniqueName("localtest-conditional")
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	put := func() error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:           aws.String(table),
			Item:                map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "J#site\x00job-1"}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		return err
	}
	if err := put(); err != nil {
		t.Fatalf("first conditional put: %v", err)
	}
	var ccf *types.ConditionalCheckFailedException
	if err := put(); !errors.As(err, &ccf) {
		t.Fatalf("second conditional put: got %v, want ConditionalCheckFailedException", err)
	}
}

// A second client is a second replica: it sees the first one's write.
func TestDynamoClientsShareOneDatabase(t *testing.T) {
	a, b := DynamoClient(t), DynamoClient(t)
	if a == b {
		t.Fatal("DynamoClient returned the same client twice")
	}
	ctx := context.Background()
	if _, err := a.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
}

func TestMotoServesS3(t *testing.T) {
	ctx := context.Background()
	c := S3Client(t)
	bucket := UniqueName("localtest-bucket")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatalf("put object: %v", err)
	}
}

// moto's server reads the environment through botocore: none of the
// developer's AWS settings reach it, only the local credentials.
func TestLocalServicesGetNoneOfTheDevelopersAWSConfig(t *testing.T) {
	got := withoutAWSConfig([]string{"PATH=/bin", "AWS_PROFILE=work", "AWS_ENDPOINT_URL=https://elsewhere", "AWS_ACCESS_KEY_ID=AKIADEVELOPER", "HOME=/h"})
	want := []string{"PATH=/bin", "HOME=/h", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_DEFAULT_REGION=us-east-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("env = %q\nwant %q", got, want)
	}
}
