package dynamo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// Pending pairings are five kinds of item: the pairing by device code
// (C#), a pointer by user code (CU#), a pointer by keypair (CK#), a ledger
// spread over ledgerShards items (CL#<n>) counting live codes by expiry
// instant, and beside each shard in its partition an entry per live code
// it counts, for the operator's list (pairing_list.go). A keypair's codes
// are all on one shard (ledgerShard). Every put and every drop is one
// transaction conditioned on the version of the shard it read, so the
// one-code-per-keypair rule is atomic across replicas. The global ceiling
// is checked against every shard, read just before the write: each start
// decides on a count at most one round trip old, so concurrent starts on
// different shards can pass the ceiling by at most one each (ledgerShards
// - 1 in all), and a relay with starts one after another holds it exactly.
// Counting by expiry instant (not listing codes) keeps each shard small:
// codes minted in one millisecond share an entry, and entries in the past
// are pruned on every write.

type ledger struct {
	shard   int
	exists  bool
	ver     int64
	buckets map[int64]int64 // expiresAt → live codes expiring then
}

func (s *Store) readLedger(ctx context.Context, shard int) (ledger, error) {
	av, err := s.getRaw(ctx, ledgerPK(shard), skPairing)
	if err != nil {
		return ledger{}, err
	}
	l := ledger{shard: shard, exists: av != nil, ver: getN(av, "ver"), buckets: map[int64]int64{}}
	if m, ok := av["live"].(*types.AttributeValueMemberM); ok {
		for k, v := range m.Value {
			at, _ := strconv.ParseInt(k, 10, 64)
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				c, _ := strconv.ParseInt(n.Value, 10, 64)
				l.buckets[at] = c
			}
		}
	}
	return l, nil
}

// live counts codes still live at now. A bucket at or below zero counts
// nothing: a code this shard never counted (one stored before the ledger
// was sharded) taken off must not hide another.
func (l ledger) live(now int64) int64 {
	n := int64(0)
	for at, c := range l.buckets {
		if at > now && c > 0 {
			n += c
		}
	}
	return n
}

// write is the ledger as a conditional put, without entries past now.
func (s *Store) writeLedger(l ledger, now int64) types.TransactWriteItem {
	live := map[string]types.AttributeValue{}
	for at, c := range l.buckets {
		if at > now && c > 0 {
			live[strconv.FormatInt(at, 10)] = num(c)
		}
	}
	put := &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
		"pk": str(ledgerPK(l.shard)), "sk": str(skPairing), "ver": num(l.ver + 1),
		"live": &types.AttributeValueMemberM{Value: live},
	}}
	if !l.exists {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("ver = :v")
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(l.ver)}
	}
	return types.TransactWriteItem{Put: put}
}

// dropItems deletes a stored pairing and its pointers, each only if it is
// still this pairing's, and takes it off the ledger l. A pointer the
// replacing pairing overwrites in the same transaction is left to that put
// (one transaction may not touch an item twice).
func (s *Store) dropItems(l *ledger, p store.PendingPairing, next *store.PendingPairing) []types.TransactWriteItem {
	l.buckets[p.ExpiresAt]--
	onlyIf := func(pk, attr, val string) types.TransactWriteItem {
		return types.TransactWriteItem{Delete: &types.Delete{
			TableName: &s.table, Key: key(pk, skPairing),
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR #a = :v"),
			ExpressionAttributeNames:  map[string]string{"#a": attr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": str(val)},
		}}
	}
	items := []types.TransactWriteItem{{Delete: &types.Delete{
		TableName: &s.table, Key: key(pairingPK(p.DeviceCode), skPairing),
		ConditionExpression: aws.String("attribute_exists(pk)"),
	}}}
	if next == nil || next.UserCode != p.UserCode {
		items = append(items, onlyIf(userCodePK(p.UserCode), "code", p.DeviceCode))
	}
	if next == nil {
		items = append(items, onlyIf(keypairPK(p.Device.Identity), "code", p.DeviceCode))
	}
	if next == nil || next.ExpiresAt != p.ExpiresAt {
		items = append(items, s.unlistEntry(p))
	}
	return items
}

// PutPairing stores a pending pairing: the keypair's earlier code is
// deleted, then the ceiling is checked against the live codes.
func (s *Store) PutPairing(ctx context.Context, p store.PendingPairing) (store.PutResult, error) {
	record, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode pairing: %w", err)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		now := s.now()
		l, err := s.readLedger(ctx, ledgerShard(p.Device.Identity))
		if err != nil {
			return "", err
		}
		others, err := s.liveElsewhere(ctx, l.shard, now)
		if err != nil {
			return "", err
		}
		prev, err := s.replacedPairing(ctx, p)
		if err != nil {
			return "", err
		}
		if prev != nil {
			l.buckets[prev.ExpiresAt]--
		}
		result := store.PutStored
		if others+l.live(now) >= int64(s.pairingCapacity) {
			result = store.PutAtCapacity
		}
		var items []types.TransactWriteItem
		if prev != nil {
			l.buckets[prev.ExpiresAt]++ // dropItems takes it off again
			next := &p
			if result == store.PutAtCapacity {
				next = nil
			}
			items = append(items, s.dropItems(&l, *prev, next)...)
		}
		if result == store.PutAtCapacity {
			if len(items) == 0 {
				return result, nil
			}
		} else {
			l.buckets[p.ExpiresAt]++
			stored, err := s.pairingItems(p, record)
			if err != nil {
				return "", err
			}
			items = append(items, stored...)
		}
		items = append([]types.TransactWriteItem{s.writeLedger(l, now)}, items...)
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if isCanceled(err) {
			// Another put or drop moved the ledger or the keypair's code:
			// decide again on what is there now.
			backoff(ctx, attempt+1)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("store pairing: %w", err)
		}
		return result, nil
	}
	return "", ErrContention
}

// replacedPairing is the keypair's earlier pending pairing, which p
// replaces, or nil. One outstanding code per keypair: a restarted pairing
// replaces its own request, so the code on screen is always the live one.
func (s *Store) replacedPairing(ctx context.Context, p store.PendingPairing) (*store.PendingPairing, error) {
	ptr, err := s.getRaw(ctx, keypairPK(p.Device.Identity), skPairing)
	if err != nil {
		return nil, err
	}
	old := getS(ptr, "code")
	if old == "" || old == p.DeviceCode {
		return nil, nil
	}
	was, ok, err := s.pairing(ctx, old)
	if err != nil || !ok {
		return nil, err
	}
	return &was, nil
}

// pairingItems are the writes that store p: its listing, its record
// (record, p encoded) and the pointers from its user code and its keypair.
func (s *Store) pairingItems(p store.PendingPairing, record []byte) ([]types.TransactWriteItem, error) {
	ttl := num(p.ExpiresAt/1000 + 3600)
	listed, err := s.listEntry(p, ttl)
	if err != nil {
		return nil, err
	}
	return []types.TransactWriteItem{listed,
		{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			"pk": str(pairingPK(p.DeviceCode)), "sk": str(skPairing), "rec": str(string(record)), "ttl": ttl,
		}}},
		{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			"pk": str(userCodePK(p.UserCode)), "sk": str(skPairing), "code": str(p.DeviceCode), "ttl": ttl,
		}}},
		{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			"pk": str(keypairPK(p.Device.Identity)), "sk": str(skPairing), "code": str(p.DeviceCode), "ttl": ttl,
		}}},
	}, nil
}

// liveElsewhere counts the live codes on every ledger shard but own, each
// read strongly consistent and at once.
func (s *Store) liveElsewhere(ctx context.Context, own int, now int64) (int64, error) {
	counts := make([]int64, ledgerShards)
	err := each(ledgerShards, func(i int) error {
		if i == own {
			return nil
		}
		l, err := s.readLedger(ctx, i)
		counts[i] = l.live(now)
		return err
	})
	n := int64(0)
	for _, c := range counts {
		n += c
	}
	return n, err
}

// pairing reads a stored pairing whether or not it has expired.
func (s *Store) pairing(ctx context.Context, deviceCode string) (store.PendingPairing, bool, error) {
	av, err := s.getRaw(ctx, pairingPK(deviceCode), skPairing)
	if err != nil || av == nil {
		return store.PendingPairing{}, false, err
	}
	var p store.PendingPairing
	if err := json.Unmarshal([]byte(getS(av, "rec")), &p); err != nil {
		return store.PendingPairing{}, false, fmt.Errorf("decode pairing: %w", err)
	}
	return p, true, nil
}

// PairingByDeviceCode finds a live pairing by the daemon's secret.
func (s *Store) PairingByDeviceCode(ctx context.Context, deviceCode string) (store.PendingPairing, bool, error) {
	p, ok, err := s.pairing(ctx, deviceCode)
	// Expiry is checked on read: a code nobody asks about costs nothing.
	if err != nil || !ok || p.ExpiresAt <= s.now() {
		return store.PendingPairing{}, false, err
	}
	return p, true, nil
}

// PairingByUserCode finds a live pairing by the code a human typed.
func (s *Store) PairingByUserCode(ctx context.Context, userCode string) (store.PendingPairing, bool, error) {
	wanted := strings.ToUpper(strings.TrimSpace(userCode))
	av, err := s.getRaw(ctx, userCodePK(wanted), skPairing)
	if err != nil || av == nil {
		return store.PendingPairing{}, false, err
	}
	p, ok, err := s.PairingByDeviceCode(ctx, getS(av, "code"))
	if err != nil || !ok || p.UserCode != wanted {
		return store.PendingPairing{}, false, err
	}
	return p, true, nil
}

// DropPairing deletes a pairing after it succeeded, so a code is single use.
func (s *Store) DropPairing(ctx context.Context, deviceCode string) error {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		p, ok, err := s.pairing(ctx, deviceCode)
		if err != nil || !ok {
			return err
		}
		l, err := s.readLedger(ctx, ledgerShard(p.Device.Identity))
		if err != nil {
			return err
		}
		items := s.dropItems(&l, p, nil)
		items = append([]types.TransactWriteItem{s.writeLedger(l, s.now())}, items...)
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if isCanceled(err) {
			backoff(ctx, attempt+1)
			continue
		}
		if err != nil {
			return fmt.Errorf("drop pairing: %w", err)
		}
		return nil
	}
	return ErrContention
}
