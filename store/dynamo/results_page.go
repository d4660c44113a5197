package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// skRotation is the sort key of a site's results rotation item (pk
// rotationPK): where its last ResultsPage stopped in the finished list.
const skRotation = "R"

func rotationPK(siteID string) string { return "RR#" + siteID }

// rotationTTL is how long a rotation item outlives its last write: a site
// that stops polling leaves nothing behind for good, and a rotation that
// lapses only starts over.
const rotationTTL = 24 * 60 * 60 // seconds

// ResultsPage is Finished with graceMs 0 bounded to limit jobs
// (store.RoutingStore.ResultsPage), read so that a poll's cost does not
// grow with the results the site holds:
//
//   - one keys-only Query of the site's finished list, newest deadline
//     first, limit+1 entries: at most limit means that is all of them;
//   - past that, the newest limit/2, and a second keys-only Query of up to
//     limit - limit/2 entries from the site's rotation item on (one
//     GetItem, eventually consistent; a stale rotation only repeats a
//     stretch, it never skips one, since it only ever moves to the end of
//     a stretch some call listed);
//   - the jobs they name, read as Finished reads them (a BatchGet, per
//     item).
//
// So a poll reads at most limit jobs and about 2 × limit index keys,
// whether the site holds a hundred results or a hundred thousand, and
// writes the rotation item (1 WCU) only when it holds more than limit.
func (s *Store) ResultsPage(ctx context.Context, siteID string, limit int) ([]store.Job, error) {
	limit = max(limit, 2)
	now := s.now()
	dk := finishedKey(siteID)
	query := func(forward bool, n int, from map[string]types.AttributeValue) (*dynamodb.QueryOutput, error) {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk AND du > :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": str(dk), ":now": num(now),
			},
			ScanIndexForward:  aws.Bool(forward),
			Limit:             aws.Int32(int32(n)),
			ExclusiveStartKey: from,
		})
		if err != nil {
			return nil, fmt.Errorf("query finished page: %w", err)
		}
		return out, nil
	}
	newest, err := query(false, limit+1, nil)
	if err != nil {
		return nil, err
	}
	var pks []string
	listed := map[string]bool{}
	if len(newest.Items) <= limit {
		for _, av := range newest.Items {
			pks = append(pks, getS(av, "pk"))
		}
		return s.finishedJobs(ctx, pks, 0)
	}
	for _, av := range newest.Items[:limit/2] {
		pk := getS(av, "pk")
		pks = append(pks, pk)
		listed[pk] = true
	}

	rot := key(rotationPK(siteID), skRotation)
	got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: rot})
	if err != nil {
		return nil, fmt.Errorf("read results rotation: %w", err)
	}
	var from map[string]types.AttributeValue
	// A rotation at or before now lies outside the Query's key condition,
	// which DynamoDB refuses as a start key: the rotation starts over.
	if du := getN(got.Item, "du"); len(got.Item) > 0 && du > now {
		from = map[string]types.AttributeValue{
			"pk": str(getS(got.Item, "at")), "sk": str(skJob), "dk": str(dk), "du": num(du),
		}
	}
	rest, err := query(true, limit-limit/2, from)
	if err != nil {
		return nil, err
	}
	for _, av := range rest.Items {
		if pk := getS(av, "pk"); !listed[pk] {
			pks = append(pks, pk)
			listed[pk] = true
		}
	}
	if len(rest.LastEvaluatedKey) == 0 || len(rest.Items) == 0 {
		// Past the end: the next call starts over.
		if len(got.Item) > 0 {
			if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: rot}); err != nil {
				return nil, fmt.Errorf("reset results rotation: %w", err)
			}
		}
	} else {
		last := rest.Items[len(rest.Items)-1]
		item := key(rotationPK(siteID), skRotation)
		item["at"] = str(getS(last, "pk"))
		item["du"] = num(getN(last, "du"))
		item["ttl"] = num(now/1000 + rotationTTL)
		if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
			return nil, fmt.Errorf("write results rotation: %w", err)
		}
	}
	return s.finishedJobs(ctx, pks, 0)
}
