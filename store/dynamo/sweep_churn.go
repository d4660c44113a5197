package dynamo

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// noteChurn records one unsealed expiry for a pair and says whether it
// crosses the threshold for a report. The record is written in the same
// transaction as the expiry, conditioned on the version read, so every
// expiry is counted exactly once across replicas and a crossing is reported
// by exactly one of them.
func (s *Store) noteChurn(ctx context.Context, siteID, owner string, now int64) (types.TransactWriteItem, *store.UnsealedChurn, error) {
	pk := churnPK(siteID, owner)
	av, err := s.getRaw(ctx, pk, skChurn)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	var times []int64
	if l, ok := av["times"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				t, _ := strconv.ParseInt(n.Value, 10, 64)
				times = append(times, t)
			}
		}
	}
	// Timestamps rather than a counter: the threshold is "inside a window",
	// and a counter would need something to reset it.
	times = append(times, now)
	kept := times[:0]
	for _, t := range times {
		if now-t <= store.ChurnWindowMs {
			kept = append(kept, t)
		}
	}
	item := map[string]types.AttributeValue{
		"pk": str(pk), "sk": str(skChurn), "ver": num(getN(av, "ver") + 1),
		"ttl": num(now/1000 + store.ChurnQuietMs/1000 + 3600),
	}
	list := make([]types.AttributeValue, 0, len(kept))
	for _, t := range kept {
		list = append(list, num(t))
	}
	item["times"] = &types.AttributeValueMemberL{Value: list}
	_, told := av["rep"]
	rep := getN(av, "rep")
	var report *store.UnsealedChurn
	if len(kept) >= store.ChurnExpiries && (!told || now-rep >= store.ChurnQuietMs) {
		rep, told = now, true
		report = &store.UnsealedChurn{SiteID: siteID, Owner: owner, Expiries: len(kept), WindowMs: store.ChurnWindowMs}
	}
	if told {
		item["rep"] = num(rep)
		// Keep the record as long as the quiet period it enforces.
		item["ttl"] = num(rep/1000 + store.ChurnQuietMs/1000 + 3600)
	}
	put := &types.Put{TableName: &s.table, Item: item}
	if av == nil {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("ver = :v")
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(getN(av, "ver"))}
	}
	return types.TransactWriteItem{Put: put}, report, nil
}

// report tells the churn callback. A report is evidence about the sweep,
// not part of it: a callback that panics must not stop jobs being requeued.
func (s *Store) report(c store.UnsealedChurn) {
	if s.onChurn == nil {
		return
	}
	defer func() { _ = recover() }()
	s.onChurn(c)
}
