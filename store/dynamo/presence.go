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

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// presenceTTLSeconds lets an unused presence record expire. Presence is a
// cache the relay rebuilds from the projection after a miss, so losing one
// costs a rebuild, never a wrong answer.
const presenceTTLSeconds = 30 * 24 * 60 * 60

// Seen records a device as present in one update: owner and device are set
// only if absent (the first sighting's stay), capabilities and withheld are
// replaced, and the stored record comes back.
func (s *Store) Seen(ctx context.Context, in store.Sighting) (store.Presence, error) {
	now := s.now()
	device, err := json.Marshal(in.Device)
	if err != nil {
		return store.Presence{}, fmt.Errorf("encode device: %w", err)
	}
	caps := in.Capabilities
	if caps == nil {
		caps = []protocol.Capability{}
	}
	withheld := in.Withheld
	if withheld == nil {
		withheld = []protocol.WithheldKind{}
	}
	capsJSON, err := json.Marshal(caps)
	if err != nil {
		return store.Presence{}, fmt.Errorf("encode capabilities: %w", err)
	}
	withheldJSON, err := json.Marshal(withheld)
	if err != nil {
		return store.Presence{}, fmt.Errorf("encode withheld: %w", err)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table,
		Key:       key(presencePK(in.RunnerID), skPresence),
		UpdateExpression: aws.String("SET runner = :r, #o = if_not_exists(#o, :o), device = if_not_exists(device, :d), " +
			"since = if_not_exists(since, :since), seen = :n, caps = :c, withheld = :w, #t = :t"),
		ExpressionAttributeNames: map[string]string{"#o": "owner", "#t": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":r": str(in.RunnerID), ":o": str(in.Owner), ":d": str(string(device)), ":since": str(s.nextSeq(now)),
			":n": num(now), ":c": str(string(capsJSON)), ":w": str(string(withheldJSON)),
			":t": num(now/1000 + presenceTTLSeconds),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return store.Presence{}, fmt.Errorf("record presence: %w", err)
	}
	return decodePresence(out.Attributes)
}

// Presence finds a runner's record.
func (s *Store) Presence(ctx context.Context, runnerID string) (store.Presence, bool, error) {
	av, err := s.getRaw(ctx, presencePK(runnerID), skPresence)
	if err != nil || av == nil {
		return store.Presence{}, false, err
	}
	p, err := decodePresence(av)
	return p, err == nil, err
}

// Everyone lists every presence record, first seen first. A scan: for
// debug pages, never on a request path.
func (s *Store) Everyone(ctx context.Context) ([]store.Presence, error) {
	type seen struct {
		since string
		p     store.Presence
	}
	var all []seen
	err := s.scanPrefix(ctx, "P#", func(av map[string]types.AttributeValue) error {
		p, err := decodePresence(av)
		if err != nil {
			return err
		}
		all = append(all, seen{getS(av, "since"), p})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b seen) int { return strings.Compare(a.since, b.since) })
	out := make([]store.Presence, 0, len(all))
	for _, x := range all {
		out = append(out, x.p)
	}
	return out, nil
}

// DropPresence deletes a runner's presence record, the way a TTL would: the
// hook for testing the relay's rebuild after a presence miss.
func (s *Store) DropPresence(ctx context.Context, runnerID string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(presencePK(runnerID), skPresence)})
	return err
}

func decodePresence(av map[string]types.AttributeValue) (store.Presence, error) {
	p := store.Presence{
		RunnerID:     getS(av, "runner"),
		Owner:        getS(av, "owner"),
		LastSeenAt:   getN(av, "seen"),
		Capabilities: []protocol.Capability{},
		Withheld:     []protocol.WithheldKind{},
	}
	if err := json.Unmarshal([]byte(getS(av, "device")), &p.Device); err != nil {
		return store.Presence{}, fmt.Errorf("decode presence device: %w", err)
	}
	if err := json.Unmarshal([]byte(getS(av, "caps")), &p.Capabilities); err != nil {
		return store.Presence{}, fmt.Errorf("decode presence capabilities: %w", err)
	}
	if err := json.Unmarshal([]byte(getS(av, "withheld")), &p.Withheld); err != nil {
		return store.Presence{}, fmt.Errorf("decode presence withheld: %w", err)
	}
	return p, nil
}
