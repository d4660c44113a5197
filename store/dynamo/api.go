package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// API is the part of *dynamodb.Client the store uses. It is an interface so
// tests can wrap the client to inject what DynamoDB Local never produces
// (transaction conflicts, throttling, a write that committed but whose
// answer was lost) and so a Meter can count capacity.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Objects is the envelope bucket: where the store keeps envelopes too
// large to inline, one object per key. It names no SDK type, so this
// package links no S3 client: the relay's functions get theirs from
// internal/lambdafn/objects, which implements it with the SDK's s3 client, and a
// program that never offloads (the site stack, the memory-backed tests)
// links none.
type Objects interface {
	// Put writes body as key's object.
	Put(ctx context.Context, key string, body []byte) error
	// Get reads key's object, at most max bytes long: a missing or longer
	// object is an error.
	Get(ctx context.Context, key string, max int64) ([]byte, error)
	// Delete removes key's object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
}

var _ API = (*dynamodb.Client)(nil)
