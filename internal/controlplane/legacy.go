package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/projection"
)

// The projection as one document, the layout before records: partition
// "V#projection", a version item (sk "V": ver, chunks) and the document's
// JSON cut into chunks (sk "F#<ver zero-padded>#<i>"). It is read only to
// migrate a deployment (Migrate) and removed after (DropLegacy); nothing
// writes it. Its items carry no vr, so an import's sweep leaves them be
// and a relay still on the document keeps serving while records are
// written beside it.
const (
	legacyPK        = "V#projection"
	legacyVersionSK = "V"
)

// legacyAttempts bounds how often a read of the document starts over when
// a writer retired the chunks it was about to read.
const legacyAttempts = 3

// LegacyDocument reads the projection stored as one document in table:
// the fixture, and false when there is none.
func LegacyDocument(ctx context.Context, api DynamoAPI, table string) (projection.Fixture, bool, error) {
	for range legacyAttempts {
		out, err := api.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(table),
			Key:            itemKey(legacyPK, legacyVersionSK),
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return projection.Fixture{}, false, err
		}
		if out.Item == nil {
			return projection.Fixture{}, false, nil
		}
		ver, err1 := attrNumber(out.Item, "ver")
		chunks, err2 := attrNumber(out.Item, "chunks")
		if err := errors.Join(err1, err2); err != nil {
			return projection.Fixture{}, false, fmt.Errorf("legacy projection version item: %w", err)
		}
		var data []byte
		n := int64(0)
		err = queryAll(ctx, api, table, legacyPK, fmt.Sprintf("F#%020d#", ver), func(item map[string]types.AttributeValue) error {
			b, ok := item["d"].(*types.AttributeValueMemberB)
			if !ok {
				return fmt.Errorf("legacy projection chunk of v%d has no bytes", ver)
			}
			data = append(data, b.Value...)
			n++
			return nil
		})
		if err != nil {
			return projection.Fixture{}, false, err
		}
		if n != chunks {
			// A writer retired these chunks between the two reads.
			continue
		}
		if len(data) == 0 {
			return projection.EmptyFixture(), true, nil
		}
		f, err := projection.Parse(data)
		if err != nil {
			return projection.Fixture{}, false, fmt.Errorf("legacy projection v%d does not parse: %w", ver, err)
		}
		return f, true, nil
	}
	return projection.Fixture{}, false, errors.New("legacy projection kept changing while it was being read")
}

// DropLegacy deletes the document's items, and answers how many there were.
func DropLegacy(ctx context.Context, api DynamoAPI, table string) (int, error) {
	var requests []types.WriteRequest
	err := queryAll(ctx, api, table, legacyPK, "", func(item map[string]types.AttributeValue) error {
		requests = append(requests, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: itemKey(legacyPK, attrString(item, "sk"))}})
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(requests), (&DynamoStorage{api: api, table: table}).batchWrite(ctx, requests)
}

func queryAll(ctx context.Context, api DynamoAPI, table, pk, prefix string, each func(map[string]types.AttributeValue) error) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ConsistentRead:            aws.Bool(true),
	}
	if prefix != "" {
		in.KeyConditionExpression = aws.String("pk = :pk AND begins_with(sk, :prefix)")
		in.ExpressionAttributeValues[":prefix"] = str(prefix)
	}
	for {
		res, err := api.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, item := range res.Items {
			if err := each(item); err != nil {
				return err
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// Migrate copies the projection stored as one document in table into
// records, as an import of it: a second run replaces the first's records,
// and records the document does not name are removed. The document stays,
// so a relay that still reads it keeps serving: an upgrade runs this right
// before it deploys the version that reads records (README, "Upgrading a
// deployment"). With dropLegacy it copies nothing and deletes the
// document instead, for after that deploy: a copy then would undo every
// change made since. It answers what it did, in a sentence.
func Migrate(ctx context.Context, api DynamoAPI, table string, dropLegacy bool) (string, error) {
	if dropLegacy {
		n, err := DropLegacy(ctx, api, table)
		if err != nil {
			return "", fmt.Errorf("delete the document: %w", err)
		}
		return fmt.Sprintf("deleted the document's %d items; the records are untouched", n), nil
	}
	f, found, err := LegacyDocument(ctx, api, table)
	if err != nil {
		return "", err
	}
	if !found {
		return "no projection document in " + table + "; nothing to copy", nil
	}
	admin := NewAdmin(AdminConfig{Store: NewStore(NewDynamoStorage(api, table))})
	res, err := admin.Import(ctx, f)
	if err != nil {
		return "", fmt.Errorf("copy the document into records: %w", err)
	}
	return fmt.Sprintf("copied the projection document into %d records (%d sites, %d consents, %d devices, %d rosters, %d revocations; %d stale items removed); the document stays until --drop-legacy",
		res.Written, len(f.Sites), len(f.Consents), len(f.Devices), len(f.Rosters), len(f.Revoked), res.Removed), nil
}
