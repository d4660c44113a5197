package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/store"
)

func TestMain(m *testing.M) { localtest.Main(m) }

func uniqueName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// newTable creates a uniquely named routing table on DynamoDB Local from
// template.yaml and deletes nothing: DynamoDB Local runs in memory and ends
// with the test binary.
func newTable(t testing.TB) string {
	t.Helper()
	name := uniqueName("routing")
	if err := CreateTable(context.Background(), localtest.DynamoClient(t), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// newBucket creates a uniquely named bucket on the moto server, and
// answers it as the store's Objects (the client the functions use) and as
// the SDK's client (for the test to look inside).
func newBucket(t testing.TB) (*objects.Bucket, *s3.Client, string) {
	t.Helper()
	client := localtest.S3Client(t)
	name := uniqueName("envelopes")
	if _, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	return objects.New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", name, true), client, name
}

// replica is one more store over table, with its own client: a separate
// Lambda instance.
func replica(t testing.TB, table string, opts store.Options, wrap func(ddb.API) ddb.API) *Store {
	t.Helper()
	var db ddb.API = localtest.DynamoClient(t)
	if wrap != nil {
		db = wrap(db)
	}
	s, err := New(Config{DB: db, Table: table, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
