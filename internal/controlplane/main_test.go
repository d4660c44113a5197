package controlplane_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// storages is each Storage implementation as a pair of instances over one
// shared document: two Lambda containers over one table, or two Stores
// over one memory document.
var storages = []struct {
	name string
	pair func(t *testing.T) (controlplane.Storage, controlplane.Storage)
}{
	{"memory", func(t *testing.T) (controlplane.Storage, controlplane.Storage) {
		m := controlplane.NewMemoryStorage()
		return m, m
	}},
	{"dynamodb-local", func(t *testing.T) (controlplane.Storage, controlplane.Storage) {
		table := newTable(t)
		return controlplane.NewDynamoStorage(localtest.DynamoClient(t), table).WithSiteCopies(testCopies),
			controlplane.NewDynamoStorage(localtest.DynamoClient(t), table).WithSiteCopies(testCopies)
	}},
}

var tableSetup sync.Mutex

// newTable creates a fresh pk/sk table in DynamoDB Local, so tests never
// see each other's projection. Only the key schema matters to the
// projection's items (they carry no index attribute), and a table of our own
// keeps these tests independent of the routing store's package.
func newTable(t *testing.T) string {
	t.Helper()
	tableSetup.Lock()
	defer tableSetup.Unlock()
	var b [6]byte
	rand.Read(b[:])
	name := "controlplane-" + hex.EncodeToString(b[:])
	_, err := localtest.DynamoClient(t).CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return name
}

func dynamoClient(t *testing.T) *dynamodb.Client {
	t.Helper()
	return localtest.DynamoClient(t)
}
