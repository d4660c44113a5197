package dynamo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// The operator's list of pending pairings. Every live pairing has one more
// item, in the partition of the ledger shard that counts it (pk CL#<n>),
// sorted by when it expires:
//
//	sk P#<expiresAt, 16 digits>#<identity key>
//
// holding the pairing without its device code, written and deleted in the
// same transactions as the pairing, its pointers and its shard, so the
// list and the ledger never disagree. The identity key makes the sort key
// unique, since a keypair has at most one live code. Listing is one Query
// of that range on each shard, newest first, starting past now: expired entries that TTL has not yet
// deleted sort below the range and are never read, so a list costs what it
// returns (at most limit items a shard), never a scan, and never more than
// the ceiling's 500 entries whatever the table holds.

// pairingListPrefix starts every list entry's sort key; pairingListEnd
// sorts after all of them ('$' follows '#'). The ledger's own item (sk
// "C") sorts below the range, so a list never reads it.
const (
	pairingListPrefix = "P#"
	pairingListEnd    = "P$"
)

func pairingListSK(expiresAt int64, identity string) string {
	return fmt.Sprintf("%s%016d#%s", pairingListPrefix, expiresAt, identity)
}

// listEntry is the put that adds p to the list, without its device code.
func (s *Store) listEntry(p store.PendingPairing, ttl types.AttributeValue) (types.TransactWriteItem, error) {
	p.DeviceCode = ""
	record, err := json.Marshal(p)
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("encode pairing: %w", err)
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
		"pk": str(ledgerPK(ledgerShard(p.Device.Identity))), "sk": str(pairingListSK(p.ExpiresAt, p.Device.Identity)),
		"rec": str(string(record)), "ttl": ttl,
	}}}, nil
}

// unlistEntry deletes p's list entry. It needs no condition of its own:
// every transaction that touches a shard's list also writes that shard
// conditioned on the version it read, so they are already serialised.
func (s *Store) unlistEntry(p store.PendingPairing) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName: &s.table, Key: key(ledgerPK(ledgerShard(p.Device.Identity)), pairingListSK(p.ExpiresAt, p.Device.Identity)),
	}}
}

// ListPairings lists live pairings, newest first, without their device
// codes: one strongly consistent Query of each ledger shard's live range,
// at most limit entries from each, merged by sort key, so a code the
// daemon was just given is on the operator's screen.
func (s *Store) ListPairings(ctx context.Context, limit int) ([]store.PendingPairing, error) {
	if limit <= 0 {
		return nil, nil
	}
	now := s.now()
	shards := make([][]listed, ledgerShards)
	err := each(ledgerShards, func(i int) error {
		var err error
		shards[i], err = s.listShard(ctx, i, now, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	var all []listed
	for _, l := range shards {
		all = append(all, l...)
	}
	// Descending sort key is newest first, ties by identity descending.
	slices.SortFunc(all, func(a, b listed) int { return strings.Compare(b.sk, a.sk) })
	out := make([]store.PendingPairing, 0, min(limit, len(all)))
	for _, l := range all[:min(limit, len(all))] {
		out = append(out, l.p)
	}
	return out, nil
}

// listed is one list entry and its sort key.
type listed struct {
	sk string
	p  store.PendingPairing
}

// listShard is up to limit of one shard's live entries, newest first.
func (s *Store) listShard(ctx context.Context, shard int, now int64, limit int) ([]listed, error) {
	in := &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(ledgerPK(shard)),
			// Live means ExpiresAt > now: the range starts at now+1.
			":lo": str(pairingListSK(now+1, "")), ":hi": str(pairingListEnd),
		},
		ScanIndexForward: aws.Bool(false),
		ConsistentRead:   aws.Bool(true),
	}
	var out []listed
	for len(out) < limit {
		in.Limit = aws.Int32(int32(min(limit-len(out), 1000)))
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list pairings: %w", err)
		}
		for _, av := range page.Items {
			var p store.PendingPairing
			if err := json.Unmarshal([]byte(getS(av, "rec")), &p); err != nil {
				return nil, fmt.Errorf("decode listed pairing: %w", err)
			}
			out = append(out, listed{sk: getS(av, "sk"), p: p})
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	return out, nil
}
