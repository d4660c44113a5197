package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// skRotation is the sort key of a site's results rotation item (pk
// rotationPK): where the rotation stands in the finished list (at and du,
// the entry it moved past; neither at the start) and when it moved there
// (mv, store clock ms).
const skRotation = "R"

func rotationPK(siteID string) string { return "RR#" + siteID }

// rotationTTL is how long a rotation item outlives its last write: a site
// that stops polling leaves nothing behind for good, and a rotation that
// lapses only starts over.
const rotationTTL = 24 * 60 * 60 // seconds

// ResultsPage is the GET results page (store.RoutingStore.ResultsPage),
// read so that a poll's cost follows the site's throughput and not the
// results it holds. The site's finished list (the due index's F#<site>
// partition, keys only) is sorted by when each result was accepted, so:
//
//   - one Query reads the fresh, newest first, from now -
//     store.ResultsFreshMs on, at most limit - store.ResultsRotated(limit);
//   - one GetItem reads the site's rotation item (eventually consistent; a
//     stale rotation only repeats a stretch, it never skips one, since it
//     only ever moves to the end of a stretch some call listed), and one
//     Query reads on from there, oldest first, for the rotation's share;
//   - a BatchGet reads the jobs they name, as Finished does (per item),
//     and drops any past its deadline that the sweep has not ended yet.
//
// So a poll reads at most limit jobs and about 2 × limit index keys
// whatever the deadlines of the results the site holds, and writes the
// rotation item (1 WCU) only when the rotation moves: at most once a
// store.ResultsRotateMs, and never while it stands at the start of a list
// it reads to the end.
func (s *Store) ResultsPage(ctx context.Context, siteID string, limit int) ([]store.Job, error) {
	limit = max(limit, 2)
	rotated := store.ResultsRotated(limit)
	now := s.now()
	dk := finishedKey(siteID)
	pks, err := s.freshResults(ctx, dk, now, limit-rotated)
	if err != nil {
		return nil, err
	}
	pks, err = s.rotateResults(ctx, siteID, dk, pks, rotated, now)
	if err != nil {
		return nil, err
	}
	jobs, err := s.finishedJobs(ctx, pks, 0)
	if err != nil {
		return nil, err
	}
	// In the page's order (a BatchGet answers in any): the fresh newest
	// first, so a byte bound on the answer keeps the newest.
	at := make(map[string]int, len(pks))
	for i, pk := range pks {
		at[pk] = i
	}
	slices.SortFunc(jobs, func(a, b store.Job) int {
		return cmp.Compare(at[jobPK(a.SiteID, a.ID)], at[jobPK(b.SiteID, b.ID)])
	})
	return jobs, nil
}

// freshResults are the keys of at most n results accepted within
// store.ResultsFreshMs of now, newest first.
func (s *Store) freshResults(ctx context.Context, dk string, now int64, n int) ([]string, error) {
	fresh, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              &s.table,
		IndexName:              aws.String("due"),
		KeyConditionExpression: aws.String("dk = :dk AND du > :since"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":dk": str(dk), ":since": num(now - store.ResultsFreshMs),
		},
		ScanIndexForward: aws.Bool(false),
		Limit:            aws.Int32(int32(n)),
	})
	if err != nil {
		return nil, fmt.Errorf("query fresh results: %w", err)
	}
	var pks []string
	for _, av := range fresh.Items {
		pks = append(pks, getS(av, "pk"))
	}
	return pks, nil
}

// rotateResults adds to the listed keys up to rotated more, read on from
// the site's rotation item oldest first, and moves the rotation on past
// them (back to the start once it has read to the end) if
// store.ResultsRotationMoves allows. Two polls that read the item at once,
// or one that reads it stale, may both move it: the bound holds between
// polls that see each other's writes, and a race costs a write more.
func (s *Store) rotateResults(ctx context.Context, siteID, dk string, pks []string, rotated int, now int64) ([]string, error) {
	listed := map[string]bool{}
	for _, pk := range pks {
		listed[pk] = true
	}
	rot := key(rotationPK(siteID), skRotation)
	got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: rot})
	if err != nil {
		return nil, fmt.Errorf("read results rotation: %w", err)
	}
	// The rotation reads past the fresh results it meets (listed already)
	// and one entry more, so that a list it reads to the end is known to
	// end here: a Query that fills its Limit reports more to read even
	// when there is none, and the next call would list nothing old.
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 aws.String("due"),
		KeyConditionExpression:    aws.String("dk = :dk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":dk": str(dk)},
		Limit:                     aws.Int32(int32(rotated + len(pks) + 1)),
	}
	if getS(got.Item, "at") != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			"pk": str(getS(got.Item, "at")), "sk": str(skJob), "dk": str(dk), "du": num(getN(got.Item, "du")),
		}
	}
	rest, err := s.db.Query(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("query finished page: %w", err)
	}
	var stop map[string]types.AttributeValue // the last entry the rotation passed
	added, ended := 0, len(rest.LastEvaluatedKey) == 0
	for _, av := range rest.Items {
		pk := getS(av, "pk")
		if !listed[pk] {
			if added == rotated {
				ended = false // more to list: the next call goes on from stop
				break
			}
			pks = append(pks, pk)
			listed[pk] = true
			added++
		}
		stop = av
	}
	atStart := getS(got.Item, "at") == ""
	restart := ended || stop == nil // past the end: the next move starts over
	if restart && atStart {
		return pks, nil // it stands at the start already
	}
	if len(got.Item) > 0 && !store.ResultsRotationMoves(getN(got.Item, "mv"), now) {
		return pks, nil
	}
	// Starting over is a put without a place, not a delete: a deleted
	// item forgets when it moved, and the next poll would move it again
	// within the bound.
	item := key(rotationPK(siteID), skRotation)
	if !restart {
		item["at"] = str(getS(stop, "pk"))
		item["du"] = num(getN(stop, "du"))
	}
	item["mv"] = num(now)
	item["ttl"] = num(now/1000 + rotationTTL)
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
		return nil, fmt.Errorf("write results rotation: %w", err)
	}
	return pks, nil
}
