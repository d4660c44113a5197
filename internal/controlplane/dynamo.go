package controlplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/store"
)

// DynamoAPI is the part of *dynamodb.Client the DynamoDB storage uses, so
// tests can wrap it.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// The items, in the relay's table, in the partitions records.go names:
//   - a record item: sk "<kind>#<seq>", r its JSON, vr = 1 (a projection
//     item, which no routing item has), l = 1 in the partition it is listed
//     from, gen the import that wrote it;
//   - a partition's version item: sk "#", v its version, vr = 1. Every
//     change that writes the partition moves it, and a change that read the
//     partition is conditioned on it;
//   - a site's read copy (copies.go), alone in its partition: sk "#", v
//     the home's version it copies, rs the home's records with their seqs,
//     vr = 1, gen the import that wrote it. It has no l: it is not a
//     record, and a listing skips it.
const versionItemSK = "#"

// maxTransactItems is DynamoDB's bound on one transaction.
const maxTransactItems = 100

// readParallel bounds the partitions one Read queries at once.
const readParallel = 8

// batchWriteItems is DynamoDB's bound on one BatchWriteItem.
const batchWriteItems = 25

// writeParallel bounds the batches one PutRecords writes at once.
const writeParallel = 8

// scanSegments is how many parallel scan segments a sweep or a listing
// walks, one after the other, page by page.
const scanSegments = 4

// scanPageItems bounds the items one Scan page examines.
const scanPageItems = 1000

// DynamoStorage is Storage in the relay's DynamoDB table.
type DynamoStorage struct {
	api    DynamoAPI
	table  string
	copies int
}

// NewDynamoStorage returns a storage in table, DefaultSiteCopies read
// copies of each site.
func NewDynamoStorage(api DynamoAPI, table string) *DynamoStorage {
	return &DynamoStorage{api: api, table: table, copies: DefaultSiteCopies}
}

// WithSiteCopies sets how many read copies each site has (1 to
// MaxSiteCopies; the caller checks the setting) and returns d. A table
// setting: every instance over one table must use the same count
// (SITE_COPIES, template.yaml's SiteCopies).
func (d *DynamoStorage) WithSiteCopies(n int) *DynamoStorage {
	if n < 1 || n > MaxSiteCopies {
		panic(fmt.Sprintf("controlplane: %d site copies; want 1 to %d", n, MaxSiteCopies))
	}
	d.copies = n
	return d
}

func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }

func number(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(pk), "sk": str(sk)}
}

// Read queries each partition, strongly consistent; a site copy is one
// item, read by its key.
func (d *DynamoStorage) Read(ctx context.Context, keys []string) (map[string]partition, error) {
	out := make(map[string]partition, len(keys))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, readParallel)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var p partition
			var err error
			if home, ok := copyHome(k); ok {
				p, err = d.readCopy(ctx, k, home)
			} else {
				p, err = d.readPartition(ctx, k)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			out[k] = p
		}()
	}
	wg.Wait()
	return out, firstErr
}

func (d *DynamoStorage) readPartition(ctx context.Context, key string) (partition, error) {
	var p partition
	var start map[string]types.AttributeValue
	for {
		res, err := d.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(d.table),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(key)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return partition{}, err
		}
		for _, item := range res.Items {
			sk := attrString(item, "sk")
			if sk == versionItemSK {
				if p.version, err = attrNumber(item, "v"); err != nil {
					return partition{}, fmt.Errorf("projection partition %s: %w", key, err)
				}
				continue
			}
			r, err := recordFromItem(item)
			if err != nil {
				return partition{}, err
			}
			p.records = append(p.records, r)
		}
		if len(res.LastEvaluatedKey) == 0 {
			return p, nil
		}
		start = res.LastEvaluatedKey
	}
}

func attrString(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func attrNumber(item map[string]types.AttributeValue, name string) (int64, error) {
	n, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("no number %q", name)
	}
	return strconv.ParseInt(n.Value, 10, 64)
}

// recordFromItem decodes a record item; its seq is in its sort key.
func recordFromItem(item map[string]types.AttributeValue) (record, error) {
	sk := attrString(item, "sk")
	_, digits, ok := strings.Cut(sk, "#")
	seq, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil {
		return record{}, fmt.Errorf("projection item %q %q has no seq", attrString(item, "pk"), sk)
	}
	return decodeRecord(seq, []byte(attrString(item, "r")))
}

// recordItems are r's items, one in each of its partitions.
func (d *DynamoStorage) recordItems(r record, gen string) ([]map[string]types.AttributeValue, error) {
	data, err := r.encode()
	if err != nil {
		return nil, err
	}
	var out []map[string]types.AttributeValue
	for _, k := range r.partitions() {
		item := itemKey(k, r.sortKey())
		item["r"] = str(string(data))
		item["vr"] = number(1)
		if k == r.listed() {
			item["l"] = number(1)
		}
		if gen != "" {
			item["gen"] = str(gen)
		}
		out = append(out, item)
	}
	return out, nil
}

// Commit writes c as one transaction.
func (d *DynamoStorage) Commit(ctx context.Context, c commit) error {
	writes, touched, err := d.recordWrites(c)
	if err != nil {
		return err
	}
	writes = append(writes, d.versionWrites(c, touched)...)
	if len(writes) > maxTransactItems {
		return invalid("this change writes %d items, more than one transaction's %d", len(writes), maxTransactItems)
	}
	_, err = d.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: writes,
		// The SDK retries a call whose answer was lost; with a token the
		// retry of a write that committed succeeds instead of failing its
		// own condition and being mistaken for a lost race.
		ClientRequestToken: aws.String(store.NewLeaseID()),
	})
	if err != nil {
		if lostRace(err) {
			return ErrVersionConflict
		}
		return fmt.Errorf("write projection records: %w", err)
	}
	return nil
}

// recordWrites are the puts and deletes of c's records, one per item in
// the order first named, and the partitions they touch.
func (d *DynamoStorage) recordWrites(c commit) ([]types.TransactWriteItem, map[string]bool, error) {
	type op struct {
		put map[string]types.AttributeValue
		del bool
	}
	items := map[[2]string]op{}
	var order [][2]string
	touched := map[string]bool{}
	set := func(pk, sk string, o op) {
		k := [2]string{pk, sk}
		if _, ok := items[k]; !ok {
			order = append(order, k)
		}
		// A put wins over a delete of the same item: a record changed in
		// place is deleted from its old partitions and put in its new.
		if prev, ok := items[k]; ok && prev.put != nil && o.del {
			return
		}
		items[k] = o
		touched[pk] = true
	}
	for _, r := range c.del {
		for _, k := range r.partitions() {
			set(k, r.sortKey(), op{del: true})
		}
	}
	for _, r := range c.put {
		its, err := d.recordItems(r, "")
		if err != nil {
			return nil, nil, err
		}
		for _, it := range its {
			set(attrString(it, "pk"), attrString(it, "sk"), op{put: it})
		}
	}
	var writes []types.TransactWriteItem
	table := aws.String(d.table)
	for _, k := range order {
		o := items[k]
		if o.put != nil {
			writes = append(writes, types.TransactWriteItem{Put: &types.Put{TableName: table, Item: o.put}})
		} else {
			writes = append(writes, types.TransactWriteItem{Delete: &types.Delete{TableName: table, Key: itemKey(k[0], k[1])}})
		}
	}
	return writes, touched, nil
}

// versionWrites move on the version of every partition c touched,
// conditioned on the version read when it was read, and check the version
// of every partition c read and left alone.
func (d *DynamoStorage) versionWrites(c commit, touched map[string]bool) []types.TransactWriteItem {
	var writes []types.TransactWriteItem
	table := aws.String(d.table)
	for pk := range touched {
		read, wasRead := c.read[pk]
		if !wasRead {
			writes = append(writes, types.TransactWriteItem{Update: &types.Update{
				TableName:                 table,
				Key:                       itemKey(pk, versionItemSK),
				UpdateExpression:          aws.String("ADD v :one SET vr = :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":one": number(1)},
			}})
			continue
		}
		item := itemKey(pk, versionItemSK)
		item["v"] = number(read + 1)
		item["vr"] = number(1)
		put := &types.Put{TableName: table, Item: item}
		conditionOn(read, &put.ConditionExpression, &put.ExpressionAttributeValues)
		writes = append(writes, types.TransactWriteItem{Put: put})
	}
	for pk, read := range c.read {
		if touched[pk] {
			continue
		}
		check := &types.ConditionCheck{TableName: table, Key: itemKey(pk, versionItemSK)}
		conditionOn(read, &check.ConditionExpression, &check.ExpressionAttributeValues)
		writes = append(writes, types.TransactWriteItem{ConditionCheck: check})
	}
	return writes
}

// conditionOn conditions a write on a partition's version still being
// read: a version of 0 is the version item's absence.
func conditionOn(read int64, expr **string, values *map[string]types.AttributeValue) {
	if read == 0 {
		*expr = aws.String("attribute_not_exists(v)")
		return
	}
	*expr = aws.String("v = :read")
	*values = map[string]types.AttributeValue{":read": number(read)}
}

// lostRace reports whether a write failed because another write got there
// first, rather than because something is wrong.
func lostRace(err error) bool {
	var cancelled *types.TransactionCanceledException
	if errors.As(err, &cancelled) {
		for _, r := range cancelled.CancellationReasons {
			if code := aws.ToString(r.Code); code == "ConditionalCheckFailed" || code == "TransactionConflict" {
				return true
			}
		}
	}
	var inFlight *types.TransactionConflictException
	return errors.As(err, &inFlight)
}

// PutRecords writes recs, and every copy of the sites among them, in
// batches, several at once.
func (d *DynamoStorage) PutRecords(ctx context.Context, gen string, recs []record) error {
	var requests []types.WriteRequest
	for _, r := range recs {
		its, err := d.recordItems(r, gen)
		if err != nil {
			return err
		}
		for _, it := range its {
			requests = append(requests, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
	}
	copies, err := d.importCopies(gen, recs)
	if err != nil {
		return err
	}
	return d.batchWrite(ctx, append(requests, copies...))
}

// batchWrite sends requests 25 at a time, writeParallel batches at once,
// resending what DynamoDB left unprocessed until it is all written.
func (d *DynamoStorage) batchWrite(ctx context.Context, requests []types.WriteRequest) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, writeParallel)
	for start := 0; start < len(requests); start += batchWriteItems {
		batch := requests[start:min(start+batchWriteItems, len(requests))]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.writeBatch(ctx, batch); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func (d *DynamoStorage) writeBatch(ctx context.Context, batch []types.WriteRequest) error {
	pause := 50 * time.Millisecond
	for attempt := 0; len(batch) > 0; attempt++ {
		if attempt > 0 {
			if err := clock.Sleep(ctx, pause); err != nil {
				return err
			}
			pause = min(2*pause, 2*time.Second)
		}
		if attempt == 20 {
			return fmt.Errorf("write projection records: %d items still unprocessed after %d attempts", len(batch), attempt)
		}
		res, err := d.api.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{d.table: batch},
		})
		if err != nil {
			return fmt.Errorf("write projection records: %w", err)
		}
		batch = res.UnprocessedItems[d.table]
	}
	return nil
}

// scanCursor is where a sweep or a listing is: a segment and the key its
// next page starts after.
type scanCursor struct {
	Segment int               `json:"s"`
	After   map[string]string `json:"a,omitempty"`
}

func parseCursor(cursor string) (scanCursor, error) {
	var c scanCursor
	if cursor == "" {
		return c, nil
	}
	data, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || json.Unmarshal(data, &c) != nil || c.Segment < 0 || c.Segment >= scanSegments {
		return scanCursor{}, invalid("cursor %q is not one this store gave", cursor)
	}
	return c, nil
}

// scanPage reads one page of the projection's items matching filter,
// and the cursor after it.
func (d *DynamoStorage) scanPage(ctx context.Context, cursor, filter string, values map[string]types.AttributeValue) ([]map[string]types.AttributeValue, string, error) {
	c, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(d.table),
		Segment:                   aws.Int32(int32(c.Segment)),
		TotalSegments:             aws.Int32(scanSegments),
		Limit:                     aws.Int32(scanPageItems),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeValues: values,
		ConsistentRead:            aws.Bool(true),
	}
	if c.After != nil {
		in.ExclusiveStartKey = itemKey(c.After["pk"], c.After["sk"])
	}
	res, err := d.api.Scan(ctx, in)
	if err != nil {
		return nil, "", err
	}
	next := scanCursor{Segment: c.Segment}
	if len(res.LastEvaluatedKey) > 0 {
		next.After = map[string]string{"pk": attrString(res.LastEvaluatedKey, "pk"), "sk": attrString(res.LastEvaluatedKey, "sk")}
	} else if next.Segment++; next.Segment == scanSegments {
		return res.Items, "", nil
	}
	data, _ := json.Marshal(next)
	return res.Items, base64.RawURLEncoding.EncodeToString(data), nil
}

// SweepStale deletes one page's projection items that import gen did not
// write: records it does not name, and every partition version, so that a
// change that read a partition before the import loses its race, and the
// copies of sites it does not name (and copies past the copy count).
func (d *DynamoStorage) SweepStale(ctx context.Context, gen, cursor string) (int, string, error) {
	items, next, err := d.scanPage(ctx, cursor, "attribute_exists(vr) AND (attribute_not_exists(gen) OR gen <> :g)",
		map[string]types.AttributeValue{":g": str(gen)})
	if err != nil {
		return 0, "", err
	}
	var requests []types.WriteRequest
	for _, it := range items {
		requests = append(requests, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: itemKey(attrString(it, "pk"), attrString(it, "sk"))}})
	}
	if err := d.batchWrite(ctx, requests); err != nil {
		return 0, "", err
	}
	return len(requests), next, nil
}

// List is one page of records, each read from the partition it is listed
// in.
func (d *DynamoStorage) List(ctx context.Context, cursor string) ([]record, string, error) {
	items, next, err := d.scanPage(ctx, cursor, "attribute_exists(l)", nil)
	if err != nil {
		return nil, "", err
	}
	out := make([]record, 0, len(items))
	for _, it := range items {
		r, err := recordFromItem(it)
		if err != nil {
			return nil, "", err
		}
		out = append(out, r)
	}
	return out, next, nil
}
