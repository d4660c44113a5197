package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// DynamoAPI is the part of *dynamodb.Client the DynamoDB storage uses, so
// tests can wrap it.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// The projection lives in the relay's table under one partition key. "V#"
// is a prefix the routing store does not use (store/dynamo/keys.go: J#, L#,
// H#, U#, P#, X#, C#, CU#, CL, and Q#, R#, S#, D# as index keys), so no
// routing item can land in it.
//
// In that partition:
//   - sk "V" is the version item: ver, chunks, and prev/prevChunks, the
//     version before it and its chunk count.
//   - sk "F#<ver>#<i>" are the document's bytes for version ver, cut into
//     chunks, because a fixture with many devices outgrows one 400 KB item.
//     Versions are zero-padded so a version's chunks sort together and in
//     order.
const (
	projectionPK = "V#projection"
	versionSK    = "V"
)

// chunkBytes keeps a chunk item (bytes plus keys and names) under
// DynamoDB's 400 KB item limit.
const chunkBytes = 350_000

// maxChunks keeps one write (every chunk, the version item and the deletes
// of an old version) under a transaction's 4 MB and 100 item limits. It
// bounds the projection at about 3.5 MB of JSON: some ten thousand devices
// with their keys. A larger deployment needs a different layout.
const maxChunks = 10

// loadAttempts bounds how often Load re-reads when a writer retired the
// chunks it was about to read.
const loadAttempts = 3

// DynamoStorage is Storage in the relay's DynamoDB table.
//
// Version is one strongly consistent GetItem of a small item. A write puts
// the new version's chunks and moves the version item in one transaction
// conditioned on the version it read, so a reader sees either the old
// document or the new one, whole. Chunks are kept for one version after they
// are superseded, so an instance that read the version just before a
// change can still load it; one that loses even that race reads again.
type DynamoStorage struct {
	api   DynamoAPI
	table string
}

// NewDynamoStorage returns a storage in table.
func NewDynamoStorage(api DynamoAPI, table string) *DynamoStorage {
	return &DynamoStorage{api: api, table: table}
}

// versionItem is the version item as read.
type versionItem struct {
	ver, chunks, prev, prevChunks int64
	exists                        bool
}

func (d *DynamoStorage) key(sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: projectionPK},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

func (d *DynamoStorage) readVersion(ctx context.Context) (versionItem, error) {
	out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(d.table),
		Key:            d.key(versionSK),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return versionItem{}, err
	}
	if out.Item == nil {
		return versionItem{}, nil
	}
	v := versionItem{exists: true}
	for name, dst := range map[string]*int64{"ver": &v.ver, "chunks": &v.chunks, "prev": &v.prev, "prevChunks": &v.prevChunks} {
		n, ok := out.Item[name].(*types.AttributeValueMemberN)
		if !ok {
			return versionItem{}, fmt.Errorf("projection version item has no number %q", name)
		}
		if *dst, err = strconv.ParseInt(n.Value, 10, 64); err != nil {
			return versionItem{}, fmt.Errorf("projection version item %q: %w", name, err)
		}
	}
	return v, nil
}

// Version is the current version.
func (d *DynamoStorage) Version(ctx context.Context) (int64, error) {
	v, err := d.readVersion(ctx)
	return v.ver, err
}

// Load is the current document.
func (d *DynamoStorage) Load(ctx context.Context) (Snapshot, error) {
	for range loadAttempts {
		v, err := d.readVersion(ctx)
		if err != nil {
			return Snapshot{}, err
		}
		if !v.exists {
			return Snapshot{}, nil
		}
		chunks, err := d.readChunks(ctx, v.ver)
		if err != nil {
			return Snapshot{}, err
		}
		if int64(len(chunks)) != v.chunks {
			// Two writes landed between reading the version and the
			// chunks, and the second deleted these. Read what is there now.
			continue
		}
		var data []byte
		for _, c := range chunks {
			data = append(data, c...)
		}
		return Snapshot{Version: v.ver, Data: data}, nil
	}
	return Snapshot{}, errors.New("projection kept changing while it was being read")
}

func (d *DynamoStorage) readChunks(ctx context.Context, ver int64) ([][]byte, error) {
	var chunks [][]byte
	var start map[string]types.AttributeValue
	for {
		out, err := d.api.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(d.table),
			KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk":     &types.AttributeValueMemberS{Value: projectionPK},
				":prefix": &types.AttributeValueMemberS{Value: chunkPrefix(ver)},
			},
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			b, ok := item["d"].(*types.AttributeValueMemberB)
			if !ok {
				return nil, fmt.Errorf("projection chunk of v%d has no bytes", ver)
			}
			chunks = append(chunks, b.Value)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return chunks, nil
		}
		start = out.LastEvaluatedKey
	}
}

func chunkPrefix(ver int64) string { return fmt.Sprintf("F#%020d#", ver) }

func chunkSK(ver int64, i int) string { return chunkPrefix(ver) + fmt.Sprintf("%04d", i) }

// Swap stores data as the next version if the document is at expect.
func (d *DynamoStorage) Swap(ctx context.Context, expect int64, data []byte) (int64, error) {
	if len(data) > maxChunks*chunkBytes {
		return 0, ErrTooLarge
	}
	// Read only to learn which old chunks to retire; the write's own
	// condition carries the decision.
	v, err := d.readVersion(ctx)
	if err != nil {
		return 0, err
	}
	if v.ver != expect {
		return 0, ErrVersionConflict
	}
	next := expect + 1
	var writes []types.TransactWriteItem
	n := 0
	for off := 0; off < len(data) || n == 0; off += chunkBytes {
		end := min(off+chunkBytes, len(data))
		item := d.key(chunkSK(next, n))
		item["d"] = &types.AttributeValueMemberB{Value: data[off:end]}
		writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(d.table), Item: item}})
		n++
	}
	version := d.key(versionSK)
	version["ver"] = number(next)
	version["chunks"] = number(int64(n))
	version["prev"] = number(expect)
	version["prevChunks"] = number(v.chunks)
	put := &types.Put{TableName: aws.String(d.table), Item: version}
	if expect == 0 {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("ver = :expect")
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":expect": number(expect)}
	}
	writes = append(writes, types.TransactWriteItem{Put: put})
	// The version before expect has had a whole version's grace for readers.
	if v.prev > 0 {
		for i := range int(v.prevChunks) {
			writes = append(writes, types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(d.table), Key: d.key(chunkSK(v.prev, i))}})
		}
	}
	_, err = d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: writes,
		// The SDK retries a call whose answer was lost; with a token the
		// retry of a write that committed succeeds instead of failing its
		// own condition and being mistaken for a lost race.
		ClientRequestToken: aws.String(store.NewLeaseID()),
	})
	if err != nil {
		if lostRace(err) {
			return 0, ErrVersionConflict
		}
		return 0, fmt.Errorf("write projection v%d: %w", next, err)
	}
	return next, nil
}

// lostRace reports whether a write failed because another write got there
// first, rather than because something is wrong.
func lostRace(err error) bool {
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) {
		for _, r := range cancelled.CancellationReasons {
			if code := aws.ToString(r.Code); code == "ConditionalCheckFailed" || code == "TransactionConflict" {
				return true
			}
		}
	}
	var inFlight *types.TransactionConflictException
	return errors.As(err, &inFlight)
}

func number(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
