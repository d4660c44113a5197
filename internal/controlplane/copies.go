package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/projection"
)

// A site's home partition (VS#<site>) is read by every request of the
// site and by every request of every daemon whose owner consents to it:
// one partition for one tenant's whole fleet. The request path therefore
// reads one of the site's read copies instead (VSC#<site>\x00<k>,
// records.go), each one item holding the home's records and version. A
// daemon request reads the copy its runner id hashes to, a site request
// one at random, so the load spreads evenly over the copies. Changes and
// registration still read and write the home (and VSK#); after a change
// commits, it writes the home's new content to every copy before it
// returns (fanOut). docs/decisions/0028-site-read-copies.md argues this.
const (
	// DefaultSiteCopies is how many read copies a site has. One site with
	// 1,000,000 idle consenting daemons reads its site record 200,000
	// times a second (a heartbeat and a claim every 10 s, 0.2 strongly
	// consistent reads a daemon-second); at half a partition's 3,000 RCU a
	// second that needs 200,000 / 1,500 = 134 copies. 256, the next power
	// of two, holds each copy at about a quarter of its limit, and 10,000
	// jobs/s of one site (4 reads a job, 40,000 a second) at a twentieth.
	DefaultSiteCopies = 256
	// MaxSiteCopies bounds the setting: a site change writes every copy.
	MaxSiteCopies = 1024
	// fanParallel bounds the copy writes one change has in flight: the
	// default count in four rounds, so a site change answers within a few
	// round trips of its commit, well inside the admin function's timeout
	// even where a write takes tens of milliseconds.
	fanParallel = 64
)

// siteCopyKey is copy k of a site's home partition.
func siteCopyKey(siteID string, k int) string {
	return prefixSiteCopy + siteID + "\x00" + strconv.Itoa(k)
}

// copyHome is the home partition of a copy key, and whether key is one.
func copyHome(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefixSiteCopy)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, 0)
	if i < 0 {
		return "", false
	}
	return siteKey(rest[:i]), true
}

// copyFor is the copy a request about q reads, of copies: a daemon's (or
// a pairing's) by a hash of who asks, so each daemon keeps to one copy and
// a fleet spreads evenly; a site's at random, because one site makes all
// its own requests and a copy per caller would be one copy.
func copyFor(q projection.Query, copies int) int {
	caller := q.RunnerID
	if caller == "" {
		caller = q.DeviceIdentity
	}
	if caller == "" {
		caller = q.Owner
	}
	if caller == "" {
		return rand.IntN(copies)
	}
	h := fnv.New32a()
	h.Write([]byte(caller))
	return int(h.Sum32() % uint32(copies))
}

// copyItems are the items of copies 0 to n-1 of a site: the home's
// records, each with its seq, and the home's version when they were read.
func copyItems(siteID string, n int, version int64, recs []record, gen string) ([]map[string]types.AttributeValue, error) {
	stored := make([]storedRecord, len(recs))
	for i, r := range recs {
		data, err := r.encode()
		if err != nil {
			return nil, err
		}
		stored[i] = storedRecord{Seq: r.Seq, R: data}
	}
	data, err := json.Marshal(stored)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]types.AttributeValue, n)
	for k := range n {
		item := itemKey(siteCopyKey(siteID, k), versionItemSK)
		item["v"] = number(version)
		item["rs"] = str(string(data))
		item["vr"] = number(1)
		if gen != "" {
			item["gen"] = str(gen)
		}
		out[k] = item
	}
	return out, nil
}

// storedRecord is one record in a copy item.
type storedRecord struct {
	Seq int64           `json:"s"`
	R   json.RawMessage `json:"r"`
}

// readCopy reads a copy. A copy not written (a site registered before the
// table had this many copies, or whose copies an import has not yet
// written) is read at the home instead: a missing copy never reads as "no
// site".
func (d *DynamoStorage) readCopy(ctx context.Context, key, home string) (partition, error) {
	res, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(d.table),
		Key:            itemKey(key, versionItemSK),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return partition{}, err
	}
	if res.Item == nil {
		return d.readPartition(ctx, home)
	}
	var p partition
	if p.version, err = attrNumber(res.Item, "v"); err != nil {
		return partition{}, fmt.Errorf("site copy %s: %w", key, err)
	}
	var stored []storedRecord
	if err := json.Unmarshal([]byte(attrString(res.Item, "rs")), &stored); err != nil {
		return partition{}, fmt.Errorf("site copy %s: %w", key, err)
	}
	for _, s := range stored {
		r, err := decodeRecord(s.Seq, s.R)
		if err != nil {
			return partition{}, err
		}
		p.records = append(p.records, r)
	}
	return p, nil
}

// siteCopies is how many copies the storage keeps of each site.
func (d *DynamoStorage) siteCopies() int { return d.copies }

// fanOut writes the site's home partition, as it is now, to each of its
// copies, several at once. Each write lands only on a copy older than what
// it writes, so a slower fan-out of an earlier change never overwrites a
// later one's. A site with no record has nothing to copy: its copies are
// absent and read at the home.
func (d *DynamoStorage) fanOut(ctx context.Context, siteID string) error {
	home, err := d.readPartition(ctx, siteKey(siteID))
	if err != nil {
		return fmt.Errorf("read site %q to copy it: %w", siteID, err)
	}
	if len(home.records) == 0 {
		return nil
	}
	items, err := copyItems(siteID, d.copies, home.version, home.records, "")
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, fanParallel)
	for _, item := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{
				TableName:                 aws.String(d.table),
				Item:                      item,
				ConditionExpression:       aws.String("attribute_not_exists(v) OR v < :v"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": number(home.version)},
			})
			var newer *types.ConditionalCheckFailedException
			if err != nil && !errors.As(err, &newer) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("site %q is changed, but %d of its %d read copies were not written (the first: %w); "+
			"requests reading those copies still see the site as it was: repeat the change, or set the site's purposes to what they are, to write them again",
			siteID, len(errs), d.copies, errs[0])
	}
	return nil
}

// importCopies are the copy writes of an import's site records: each copy
// holds what the import wrote to the site's home, at version 0, so the
// first change after the import (home version 1) replaces it. An import
// writes a site's records in one page (records puts a fixture's sites in
// one list), so its copies hold every record of the site.
func (d *DynamoStorage) importCopies(gen string, recs []record) ([]types.WriteRequest, error) {
	bySite := map[string][]record{}
	var order []string
	for _, r := range recs {
		if r.Site == nil {
			continue
		}
		if _, ok := bySite[r.Site.SiteID]; !ok {
			order = append(order, r.Site.SiteID)
		}
		bySite[r.Site.SiteID] = append(bySite[r.Site.SiteID], r)
	}
	var out []types.WriteRequest
	for _, site := range order {
		items, err := copyItems(site, d.copies, 0, bySite[site], gen)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			out = append(out, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
	}
	return out, nil
}
