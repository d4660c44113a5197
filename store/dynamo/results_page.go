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
// rotationPK): where the rotation stands in the finished list (sh, the
// shard, 0 when absent; at and du, the entry of that shard it moved past,
// neither at the shard's start) and when it moved there (mv, store clock
// ms). One item a site: it is written at most once a
// store.ResultsRotateMs and read once a poll, so its partition follows the
// site's poll rate, never its jobs' rate.
const skRotation = "R"

func rotationPK(siteID string) string { return "RR#" + siteID }

// rotationTTL is how long a rotation item outlives its last write: a site
// that stops polling leaves nothing behind for good, and a rotation that
// lapses only starts over.
const rotationTTL = 24 * 60 * 60 // seconds

// emptyHoldMs is how long after a rotation found every shard of a site's
// finished list empty (em, store clock ms) a page with nothing fresh
// skips the rotation's Queries: any result accepted since then is in the
// fresh window, which the page read, so the site still holds none. A site
// with no results pays its poll the fresh Queries and a GetItem, and the
// full walk (a Query a shard, and a write) once an emptyHoldMs.
const emptyHoldMs = store.ResultsFreshMs / 2

// ResultsPage is the GET results page (store.RoutingStore.ResultsPage),
// read so that a poll's cost follows the site's throughput and not the
// results it holds. The site's finished list (the due index's F#<site>
// partitions, keys only, Config.FinishedShards of them) is sorted within
// each shard by when each result was accepted, so:
//
//   - one Query a shard (concurrently) reads the fresh, newest first, from
//     now - store.ResultsFreshMs on, and the page keeps the newest of all,
//     at least limit - store.ResultsRotated(limit) and every one accepted
//     in the last store.ResultsRecentMs, at most store.ResultsRecentMax;
//   - one GetItem reads the site's rotation item (eventually consistent; a
//     stale rotation only repeats a stretch, it never skips one, since it
//     only ever moves to the end of a stretch some call listed), and a
//     Query a shard reads on from there, oldest first, for the rotation's
//     share, shard after shard until the share is full or it has come
//     round to where it started (or none, emptyHoldMs);
//   - BatchGets read the jobs they name, as Finished does (per item), and
//     drop any past its deadline that the sweep has not ended yet.
//
// So a poll makes at most 1 + 2 x FinishedShards Queries and GetItems
// and a BatchGet per 100 results listed (at most 1 + 128 + 41 with the
// defaults; a site holding results fills the rotation's share in the
// first shard or few it reads), reads at most its results' jobs and their keys, whatever the
// deadlines of the results the site holds, and writes the rotation item
// (1 WCU) only when the rotation moves: at most once a
// store.ResultsRotateMs, and never while it stands where it would move to.
func (s *Store) ResultsPage(ctx context.Context, siteID string, limit int) ([]store.Job, error) {
	limit = max(limit, 2)
	rotated := store.ResultsRotated(limit)
	now := s.now()
	fresh, err := s.freshResults(ctx, siteID, now, limit-rotated)
	if err != nil {
		return nil, err
	}
	pks, err := s.rotateResults(ctx, siteID, fresh, rotated, now)
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

// finishedEntry is a finished list entry as a page reads it.
type finishedEntry struct {
	pk    string
	du    int64
	shard int
}

// freshResults are the entries of the results accepted within
// store.ResultsFreshMs of now, newest first: at least n of them (or all
// there are) and every one accepted within store.ResultsRecentMs, at
// most store.ResultsRecentMax. Each shard's Query reads at most n and
// twice its share of ResultsRecentMax; where one stopped short, entries
// older than its last are left out, since the shard may hold newer ones
// unread (the rotation, or the next poll, lists them).
func (s *Store) freshResults(ctx context.Context, siteID string, now int64, n int) ([]finishedEntry, error) {
	perShard := n + 2*((store.ResultsRecentMax+s.finishedShards-1)/s.finishedShards)
	found := make([][]finishedEntry, s.finishedShards)
	cut := make([]int64, s.finishedShards) // the oldest du a shard that stopped short read
	err := each(s.finishedShards, func(shard int) error {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk AND du > :since"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": str(finishedKey(siteID, shard)), ":since": num(now - store.ResultsFreshMs),
			},
			ScanIndexForward: aws.Bool(false),
			Limit:            aws.Int32(int32(perShard)),
		})
		if err != nil {
			return fmt.Errorf("query fresh results: %w", err)
		}
		for _, av := range out.Items {
			found[shard] = append(found[shard], finishedEntry{pk: getS(av, "pk"), du: getN(av, "du"), shard: shard})
		}
		if len(out.LastEvaluatedKey) > 0 && len(found[shard]) > 0 {
			cut[shard] = found[shard][len(found[shard])-1].du
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	all := slices.Concat(found...)
	oldest := slices.Max(cut)
	all = slices.DeleteFunc(all, func(e finishedEntry) bool { return e.du < oldest })
	slices.SortStableFunc(all, func(a, b finishedEntry) int { return cmp.Compare(b.du, a.du) })
	keep := min(len(all), n)
	for keep < len(all) && keep < store.ResultsRecentMax && all[keep].du > now-store.ResultsRecentMs {
		keep++
	}
	return all[:keep], nil
}

// rotationPlace is where a site's rotation stands: after entry (pk, du)
// of finished shard shard, or at the shard's start (pk "").
type rotationPlace struct {
	shard int
	pk    string
	du    int64
}

// rotateResults is the listed entries' keys and up to rotated more, read
// on from the site's rotation item oldest first, shard after shard; it
// moves the rotation on past them (to the next shard's start once it has
// read a shard to the end) if store.ResultsRotationMoves allows. Two polls
// that read the item at once, or one that reads it stale, may both move
// it: the bound holds between polls that see each other's writes, and a
// race costs a write more.
func (s *Store) rotateResults(ctx context.Context, siteID string, fresh []finishedEntry, rotated int, now int64) ([]string, error) {
	listed := map[string]bool{}
	inShard := map[int]int{}
	pks := make([]string, 0, len(fresh)+rotated)
	for _, e := range fresh {
		listed[e.pk] = true
		inShard[e.shard]++
		pks = append(pks, e.pk)
	}
	rot := key(rotationPK(siteID), skRotation)
	got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: rot})
	if err != nil {
		return nil, fmt.Errorf("read results rotation: %w", err)
	}
	// A place on a shard above this store's count (the count was lowered)
	// starts over at shard 0.
	from := rotationPlace{shard: int(getN(got.Item, "sh")), pk: getS(got.Item, "at"), du: getN(got.Item, "du")}
	if from.shard >= s.finishedShards {
		from = rotationPlace{}
	}
	if em := getN(got.Item, "em"); len(fresh) == 0 && em > 0 && em <= now && now-em < emptyHoldMs {
		return pks, nil
	}
	more, place, read, err := s.walkRotation(ctx, siteID, from, rotated, listed, inShard)
	if err != nil {
		return nil, err
	}
	pks = append(pks, more...)
	if !read && len(fresh) == 0 && from.pk == "" {
		// Every shard is empty: say so, so the next pages skip the walk.
		return pks, s.putRotation(ctx, siteID, rotationPlace{shard: from.shard}, now, true)
	}
	if place == from {
		return pks, nil // it stands where it would move to already
	}
	if len(got.Item) > 0 && !store.ResultsRotationMoves(getN(got.Item, "mv"), now) {
		return pks, nil
	}
	return pks, s.putRotation(ctx, siteID, place, now, false)
}

// putRotation writes the rotation's place, moved now; empty marks a site
// whose every shard was found empty. Starting over is a put without a
// place, not a delete: a deleted item forgets when it moved, and the next
// poll would move it again within the bound.
func (s *Store) putRotation(ctx context.Context, siteID string, place rotationPlace, now int64, empty bool) error {
	item := key(rotationPK(siteID), skRotation)
	if place.shard != 0 {
		item["sh"] = num(int64(place.shard))
	}
	if place.pk != "" {
		item["at"] = str(place.pk)
		item["du"] = num(place.du)
	}
	item["mv"] = num(now)
	if empty {
		item["em"] = num(now)
	}
	item["ttl"] = num(now/1000 + rotationTTL)
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
		return fmt.Errorf("write results rotation: %w", err)
	}
	return nil
}

// walkRotation reads on from the rotation's place, shard after shard, up
// to rotated entries not listed already: their keys, where the walk
// stopped, and whether it read any entry at all.
func (s *Store) walkRotation(ctx context.Context, siteID string, from rotationPlace, rotated int, listed map[string]bool, inShard map[int]int) ([]string, rotationPlace, bool, error) {
	var pks []string
	place, added, read := from, 0, false
	for range s.finishedShards {
		dk := finishedKey(siteID, place.shard)
		// The rotation reads past the fresh results it meets (listed
		// already) and one entry more, so that a shard it reads to the end
		// is known to end here: a Query that fills its Limit reports more
		// to read even when there is none, and the next call would list
		// nothing old.
		in := &dynamodb.QueryInput{
			TableName:                 &s.table,
			IndexName:                 aws.String("due"),
			KeyConditionExpression:    aws.String("dk = :dk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":dk": str(dk)},
			Limit:                     aws.Int32(int32(rotated - added + inShard[place.shard] + 1)),
		}
		if place.pk != "" {
			in.ExclusiveStartKey = map[string]types.AttributeValue{
				"pk": str(place.pk), "sk": str(skJob), "dk": str(dk), "du": num(place.du),
			}
		}
		rest, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, rotationPlace{}, false, fmt.Errorf("query finished page: %w", err)
		}
		ended := len(rest.LastEvaluatedKey) == 0
		for _, av := range rest.Items {
			read = true
			pk := getS(av, "pk")
			if !listed[pk] {
				if added == rotated {
					ended = false // more to list: the next call goes on from place
					break
				}
				pks = append(pks, pk)
				listed[pk] = true
				added++
			}
			place.pk, place.du = pk, getN(av, "du")
		}
		if !ended {
			break
		}
		// Past the shard's end: the next move starts the next shard.
		place = rotationPlace{shard: (place.shard + 1) % s.finishedShards}
		if added == rotated {
			break
		}
	}
	return pks, place, read, nil
}
