// Package partkey names the DynamoDB partitions a call to the routing
// table touches, from the call's input alone: the partition key of every
// item it reads or writes on the table, the index partition a Query reads,
// and the index partitions a write puts entries into. The bench's capacity
// meter counts capacity by these names, and localtest/hotkeys counts the
// requests that touch each one; both read them here, so a key means the
// same thing in both.
//
// DynamoDB serves each partition key from one partition, and one item
// cannot be split, so a key that every request touches caps the whole
// fleet however the table scales.
package partkey

import (
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/store/dynamo"
)

// hashKeys are the partition key attribute of the table ("") and of each
// global secondary index (store/dynamo's tableInput). A key is named
// "<index>:<value>" for an index and by its value alone for the table. An
// index missing here names no partition (Unknown), so a new index must be
// added: localtest/hotkeys checks this list against the table it creates.
var hashKeys = map[string]string{"": "pk", "queue": "qk", "sitelist": "lk", "due": "dk"}

// HashKey is the partition key attribute of index ("" the table), and
// whether this package knows the index.
func HashKey(index string) (string, bool) {
	k, ok := hashKeys[index]
	return k, ok
}

// Names of what a call touches that has no partition key value in the
// request.
const (
	// Scan is every partition of the table or index: a Scan reads them all.
	Scan = "(scan)"
	// Unknown is a call whose partition key this package cannot read
	// (a key without the hash attribute, or an index it does not know).
	Unknown = "(no key in the request)"
)

// Of is the partition key of every item a call touches, one entry per
// item (a key repeats when two items of a transaction share it), so a
// call's capacity can be shared out over its entries. A read of an index
// names the index's partition; a write names the table's key (its index
// maintenance is IndexWrites). A call that is not a DynamoDB item or
// query operation names nothing.
func Of(params any) []string {
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		return []string{itemKey("", in.Key)}
	case *dynamodb.PutItemInput:
		return []string{itemKey("", in.Item)}
	case *dynamodb.UpdateItemInput:
		return []string{itemKey("", in.Key)}
	case *dynamodb.DeleteItemInput:
		return []string{itemKey("", in.Key)}
	case *dynamodb.QueryInput:
		index := deref(in.IndexName)
		return []string{queryKey(index, deref(in.KeyConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues)}
	case *dynamodb.ScanInput:
		return []string{Scan}
	case *dynamodb.TransactWriteItemsInput:
		var out []string
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				out = append(out, itemKey("", it.Put.Item))
			case it.Update != nil:
				out = append(out, itemKey("", it.Update.Key))
			case it.Delete != nil:
				out = append(out, itemKey("", it.Delete.Key))
			case it.ConditionCheck != nil:
				out = append(out, itemKey("", it.ConditionCheck.Key))
			}
		}
		return out
	case *dynamodb.TransactGetItemsInput:
		var out []string
		for _, it := range in.TransactItems {
			if it.Get != nil {
				out = append(out, itemKey("", it.Get.Key))
			}
		}
		return out
	case *dynamodb.BatchGetItemInput:
		var out []string
		for _, ka := range in.RequestItems {
			for _, k := range ka.Keys {
				out = append(out, itemKey("", k))
			}
		}
		return out
	case *dynamodb.BatchWriteItemInput:
		var out []string
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil:
					out = append(out, itemKey("", r.PutRequest.Item))
				case r.DeleteRequest != nil:
					out = append(out, itemKey("", r.DeleteRequest.Key))
				}
			}
		}
		return out
	}
	return nil
}

// IndexWrites is, by index, the index partitions a write call names for
// its items: the index's key attribute in a Put's item, or set by an
// Update's SET (name = :value). An entry leaving an index (REMOVE, or a
// Delete) names no partition in the request, so it is not listed.
func IndexWrites(params any) map[string][]string {
	out := map[string][]string{}
	fromItem := func(item map[string]types.AttributeValue) {
		for index := range hashKeys {
			if index == "" {
				continue
			}
			if v, ok := item[hashKeys[index]].(*types.AttributeValueMemberS); ok {
				out[index] = append(out[index], Name(index, v.Value))
			}
		}
	}
	fromUpdate := func(expr *string, names map[string]string, values map[string]types.AttributeValue) {
		for index := range hashKeys {
			if index == "" {
				continue
			}
			if k := queryKey(index, deref(expr), names, values); k != Unknown {
				out[index] = append(out[index], k)
			}
		}
	}
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		fromItem(in.Item)
	case *dynamodb.UpdateItemInput:
		fromUpdate(in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	case *dynamodb.BatchWriteItemInput:
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					fromItem(r.PutRequest.Item)
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				fromItem(it.Put.Item)
			case it.Update != nil:
				fromUpdate(it.Update.UpdateExpression, it.Update.ExpressionAttributeNames, it.Update.ExpressionAttributeValues)
			}
		}
	}
	return out
}

// Touched is every partition a call touches, each once: its items' keys
// (Of) and the index partitions it writes entries into (IndexWrites).
func Touched(params any) []string {
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range Of(params) {
		add(k)
	}
	for _, ks := range IndexWrites(params) {
		for _, k := range ks {
			add(k)
		}
	}
	return out
}

// itemKey names the partition of an item (or key) on index ("" the table).
func itemKey(index string, item map[string]types.AttributeValue) string {
	v, ok := item[hashKeys[index]].(*types.AttributeValueMemberS)
	if !ok {
		return Unknown
	}
	return Name(index, v.Value)
}

// equality is one "name = :value" term of a key condition.
var equality = regexp.MustCompile(`(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)`)

// queryKey names the partition a Query reads: the value its key condition
// sets the index's partition key attribute equal to (the only equality a
// key condition may put on it).
func queryKey(index, cond string, names map[string]string, values map[string]types.AttributeValue) string {
	hash, ok := hashKeys[index]
	if !ok {
		return Unknown
	}
	for _, m := range equality.FindAllStringSubmatch(cond, -1) {
		attr := m[1]
		if n, ok := names[attr]; ok {
			attr = n
		}
		if attr != hash {
			continue
		}
		if v, ok := values[m[2]].(*types.AttributeValueMemberS); ok {
			return Name(index, v.Value)
		}
	}
	return Unknown
}

// Name is how a key is printed: the store's NUL separators as "/" and any
// other control byte as "?", so a report stays one readable line, with
// "<index>:" before a key of an index. Keys are ids and prefixes (site,
// owner, runner and job ids); no key holds a secret.
func Name(index, value string) string {
	value = strings.Map(func(r rune) rune {
		switch {
		case r == 0:
			return '/'
		case r < 0x20 || r == 0x7f:
			return '?'
		}
		return r
	}, value)
	if index == "" {
		return value
	}
	return index + ":" + value
}

// Family is a key spread over shards: each call picks its member by a hash
// of what it names or at random, so at fleet scale every member takes an
// equal part of the family's load, whichever members a sample touched.
// A member's name is Prefix, then anything ending in '#' or '/' (the
// store's NUL separator as Name prints it), or nothing, then its shard
// number: "due:D#17" (prefix "due:D#"), or, for a family with one logical
// key per site, "VS#site-a#3" (prefix "VS#"). Such a family groups its
// members by what comes before the shard number: one site's copies are
// one family member set, another site's another.
type Family struct {
	Prefix string
	Shards int
	// Bare is a family whose shard 0 is the key it was before it was
	// spread, with no shard number ("U#site-a" beside "U#site-a/5"), so a
	// table written before keeps its items where the readers look.
	Bare bool
}

// Families are the keys the relay spreads over shards, with the default
// shard count of each (the bench's stacks run the defaults). A key spread
// over shards is added here, or the bench bills its sample's members as if
// each took the whole family's load.
var Families = []Family{
	{"due:D#", dynamo.DefaultDueShards, false},
	{"due:ED#", dynamo.DefaultDueShards, false},
	{"due:SD#", dynamo.DefaultDueShards, false},
	{"CLOCK#probe#", dynamo.ClockProbeShards, false},
	// A site's read copies, VSC#<site>\x00<k> (named "VSC#<site>/<k>"):
	// one family per site.
	{"VSC#", controlplane.DefaultSiteCopies, false},
	// A site's unsealed sets, by owner, and its finished list, by job
	// (U#<site>\x00<n>, F#<site>\x00<n>; shard 0 the bare key).
	{"U#", dynamo.DefaultUnsealedShards, true},
	{"due:F#", dynamo.DefaultFinishedShards, true},
}

// FamilyOf is the family key is a member of: the name that stands for
// every member of its set (its shard number printed as "*", like
// "due:D#*") and the family's shard count.
func FamilyOf(key string) (name string, shards int, ok bool) {
	for _, f := range Families {
		rest, found := strings.CutPrefix(key, f.Prefix)
		if !found {
			continue
		}
		head := strings.TrimRight(rest, "0123456789")
		if head == rest || head != "" && !strings.HasSuffix(head, "#") && !strings.HasSuffix(head, "/") {
			if f.Bare && rest != "" {
				return f.Prefix + rest + "/*", f.Shards, true // shard 0
			}
			continue // no shard number, or one not after a separator
		}
		return f.Prefix + head + "*", f.Shards, true
	}
	return "", 0, false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
