package dynamo

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// A lease id names the site of its job. Holder-scoped calls carry a job id
// and a lease id but no site, and job ids are each site's to choose, so the
// store must learn the site from the lease. A lease pointer item beside
// every claim (deleted when the grant ends) would be two item writes per
// grant, both inside the claim's and the end's transactions, where they
// cost double. Instead the first four bytes of
// the lease id are a tag of the site, and one tag item per site, written
// once, says which site a tag stands for. The id stays a version 4 UUID
// (a site's Postgres adapter stores it in a uuid column) with 90 random
// bits.
//
// A tag is the hash of the site, salted on the (rare) collision with a tag
// already taken by another site: the tag item is created under the
// condition that it is free or already this site's, so a tag never stands
// for two sites. Tags never change, so every replica caches them for good.

// tagSalts bounds the salts tried for one site before giving up.
const tagSalts = 16

// leaseTag returns the tag for site, creating its tag item if this replica
// has not seen it yet.
func (s *Store) leaseTag(ctx context.Context, site string) ([4]byte, error) {
	if t, ok := s.tagOf.Load(site); ok {
		return t.([4]byte), nil
	}
	for salt := 0; salt < tagSalts; salt++ {
		h := fnv.New32a()
		h.Write([]byte(site + "\x00" + strconv.Itoa(salt)))
		var tag [4]byte
		copy(tag[:], h.Sum(nil))
		ok, err := s.claimTag(ctx, tag, site)
		if err != nil {
			return [4]byte{}, err
		}
		if ok {
			s.tagOf.Store(site, tag)
			s.siteOf.Store(hex.EncodeToString(tag[:]), site)
			return tag, nil
		}
	}
	return [4]byte{}, fmt.Errorf("lease tag for site %q: %d tags taken", site, tagSalts)
}

// claimTag makes tag stand for site unless it stands for another site.
// Idempotent, so an answer lost to a fault is settled by trying again.
func (s *Store) claimTag(ctx context.Context, tag [4]byte, site string) (bool, error) {
	pk := tagPK(hex.EncodeToString(tag[:]))
	var lastErr error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                 &s.table,
			Item:                      map[string]types.AttributeValue{"pk": str(pk), "sk": str(skTag), "site": str(site)},
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR site = :site"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":site": str(site)},
		})
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			lastErr = err
			continue
		}
		// Taken, or a refusal that was not one: the item says which.
		av, err := s.getRaw(ctx, pk, skTag)
		if err != nil {
			lastErr = err
			continue
		}
		if av != nil {
			return getS(av, "site") == site, nil
		}
	}
	return false, fmt.Errorf("lease tag for site %q: %w (last error: %v)", site, ErrContention, lastErr)
}

// newLease mints a lease id for a job of site.
func (s *Store) newLease(ctx context.Context, site string) (string, error) {
	tag, err := s.leaseTag(ctx, site)
	if err != nil {
		return "", err
	}
	id := []byte(store.NewLeaseID())
	copy(id[:8], hex.EncodeToString(tag[:]))
	return string(id), nil
}

// leaseSite is the site a lease id names, or "" when it names none (not
// one of ours, or made up).
func (s *Store) leaseSite(ctx context.Context, leaseID string) (string, error) {
	if len(leaseID) != 36 {
		return "", nil
	}
	tag := leaseID[:8]
	if _, err := hex.DecodeString(tag); err != nil {
		return "", nil
	}
	if site, ok := s.siteOf.Load(tag); ok {
		return site.(string), nil
	}
	av, err := s.getRaw(ctx, tagPK(tag), skTag)
	if err != nil {
		return "", fmt.Errorf("resolve lease tag: %w", err)
	}
	site := getS(av, "site")
	if site != "" {
		s.siteOf.Store(tag, site)
	}
	return site, nil
}

// putHint records, before a claim's writes (the slot, then the job), that
// runner is about to hold jobID on site. Holder-scoped calls whose lease does not resolve to
// their job read the hints to tell stale-lease from not-found. A hint is
// only a place to look: every job it names is read back and judged, so a
// hint left by a claim that failed, or by a grant that ended, is harmless,
// and nothing ever deletes one before its TTL.
func (s *Store) putHint(ctx context.Context, runnerID string, j *jobItem) error {
	err := s.putOnce(ctx, map[string]types.AttributeValue{
		"pk": str(holderPK(runnerID, j.JobID)), "sk": str(holderSK(j.Site)),
		"site": str(j.Site), "ttl": num(j.Deadline/1000 + ttlGraceSeconds),
	})
	if err != nil {
		return fmt.Errorf("write holder hint: %w", err)
	}
	return nil
}

// putOnce writes an item that is written whole and never changed, without
// a condition, so writing it again is harmless: an answer lost to a fault
// (throttling, a conflict, a lost acknowledgement) is settled by writing
// it again.
func (s *Store) putOnce(ctx context.Context, item map[string]types.AttributeValue) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
		if err == nil || ctx.Err() != nil || refusedOutright(err) {
			return err
		}
	}
	return err
}

// hintedSites lists the sites on which runner may hold a job with this id.
func (s *Store) hintedSites(ctx context.Context, runnerID, jobID string) ([]string, error) {
	var sites []string
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(holderPK(runnerID, jobID))},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("read holder hints: %w", err)
		}
		for _, av := range out.Items {
			sites = append(sites, getS(av, "site"))
		}
		if len(out.LastEvaluatedKey) == 0 {
			return sites, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
