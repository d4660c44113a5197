package bench

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB serves each partition key from one partition, which takes at
// most 3,000 RCU and 1,000 WCU a second; one item cannot be split, so a key
// every request reads or writes caps the whole fleet however the table
// scales. The meter therefore also counts every call by the exact partition
// key(s) it touches, so the bench can name the hottest keys and the fleet
// size at which the first of them saturates.
const (
	partitionRCU = 3000.0
	partitionWCU = 1000.0
)

// hashKeys are the partition key attribute of the table ("") and of each
// global secondary index (store/dynamo's tableInput). A key is named
// "<index>:<value>" for an index and by its value alone for the table.
var hashKeys = map[string]string{"": "pk", "queue": "qk", "sitelist": "lk", "due": "dk"}

// Keys a call touches that have no partition key value in the request.
const (
	keyScan    = "(scan)"
	keyUnknown = "(no key in the request)"
)

// callKeys is the partition key of every item a call touches, one entry
// per item (a key repeats when two items of a transaction share it), so
// the call's capacity can be shared out over its entries. A read of an
// index names the index's partition; a write names the table's key, and
// its index maintenance goes to the index partitions it names
// (keyShares).
func callKeys(params any) []string {
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
		index := derefString(in.IndexName)
		return []string{queryKey(index, derefString(in.KeyConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues)}
	case *dynamodb.ScanInput:
		return []string{keyScan}
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

// itemKey names the partition of an item (or key) on index ("" the table).
func itemKey(index string, item map[string]types.AttributeValue) string {
	v, ok := item[hashKeys[index]].(*types.AttributeValueMemberS)
	if !ok {
		return keyUnknown
	}
	return keyName(index, v.Value)
}

// equality is one "name = :value" term of a key condition.
var equality = regexp.MustCompile(`(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)`)

// queryKey names the partition a Query reads: the value its key condition
// sets the index's partition key attribute equal to (the only equality a
// key condition may put on it).
func queryKey(index, cond string, names map[string]string, values map[string]types.AttributeValue) string {
	hash, ok := hashKeys[index]
	if !ok {
		return keyUnknown
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
			return keyName(index, v.Value)
		}
	}
	return keyUnknown
}

// keyName is how a key is printed: the store's NUL separators as "/" and
// any other control byte as "?", so the report stays one readable line.
// Keys are ids and prefixes (site, owner, runner and job ids); no key
// holds a secret.
func keyName(index, value string) string {
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

// share is one item's part of a call's capacity when the call touches n
// items: the call's units over its items, equally. DynamoDB reports a
// transaction's or batch's capacity per table, not per item; the store's
// multi-item calls write small items of like size, so equal shares are
// close, and they keep every key's total summing to the call's.
func share(c Capacity, n int) Capacity {
	f := 1 / float64(n)
	return Capacity{Calls: c.Calls, ReadUnits: c.ReadUnits * f, WriteUnits: c.WriteUnits * f, IndexWrite: c.IndexWrite * f}
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// KeyHeat is one partition key's capacity per job of the lifecycle phase
// and per daemon-second of the idle phase.
type KeyHeat struct {
	Key string `json:"key"`
	// Scope is "job" when the key names a job, "site", "owner" or
	// "runner" when it names one of the workload's sites, owners or
	// runners (classify), "shared" otherwise.
	Scope           string   `json:"scope"`
	PerJob          Capacity `json:"perJob"`
	PerDaemonSecond Capacity `json:"perIdleDaemonSecond"`
}

// Heat is the hottest keys and where the first of them saturates.
type Heat struct {
	Keys []KeyHeat `json:"keys"`
	// IdleDaemons is the idle fleet (daemons at the default heartbeat) at
	// which the first key reaches a partition's reads or writes.
	IdleDaemons *Saturation `json:"idleDaemons,omitempty"`
	// JobsPerSecond is, for each number of sites, the job rate spread
	// evenly over them at which the first key saturates.
	JobsPerSecond []Saturation `json:"jobsPerSecond,omitempty"`
}

// Saturation is the first key to reach a partition's limit under one load.
type Saturation struct {
	Sites int     `json:"sites,omitempty"`
	Key   string  `json:"key"`
	Reads bool    `json:"reads"` // the reads limit, not the writes
	At    float64 `json:"at"`    // daemons, or jobs/s
}

// hotKeys is how many keys the report lists.
const hotKeys = 10

// heatSites are the fleet sizes the jobs/s saturation is printed for.
var heatSites = []int{1, 10, 100, 1000}

// classify says whose a key is. A key holding a job id is that job's
// alone: its load is one job's however many run, so it never saturates.
// A key holding one of the workload's site, owner or runner ids is that
// entity's, and a fleet grown in the workload's proportions spreads such
// keys' load over more of them. Any other key is shared by the whole
// fleet.
func classify(key string, w *world) string {
	if jobIDs.MatchString(key) {
		return "job"
	}
	for _, s := range w.sites {
		if strings.Contains(key, s.id) {
			return "site"
		}
	}
	for _, d := range w.daemons {
		if strings.Contains(key, d.owner) {
			return "owner"
		}
		if strings.Contains(key, d.runnerID) {
			return "runner"
		}
	}
	return "shared"
}

// load is the larger of a capacity's reads and writes as a fraction of
// one partition's limits per second.
func load(c Capacity) float64 { return max(c.ReadUnits/partitionRCU, c.WriteUnits/partitionWCU) }

// heat ranks the keys of a lifecycle phase (per job) and an idle phase
// (per daemon-second): the hottest of each list in turn, by load, until
// hotKeys are taken, so the idle fleet's keys show beside the jobs'.
// Either phase may be missing (nil keys).
func heat(w *world, jobs int, lifecycle map[string]Capacity, idle *IdlePhase) *Heat {
	perJob := scaled(lifecycle, float64(jobs))
	var perDS map[string]Capacity
	if idle != nil {
		perDS = scaled(idle.Keys, idle.DaemonSeconds())
	}
	if len(perJob) == 0 && len(perDS) == 0 {
		return nil
	}
	h := &Heat{}
	taken := map[string]bool{}
	a, b := byLoad(perJob), byLoad(perDS)
	for len(h.Keys) < hotKeys && (len(a) > 0 || len(b) > 0) {
		for _, list := range []*[]string{&a, &b} {
			for len(*list) > 0 && len(h.Keys) < hotKeys {
				k := (*list)[0]
				*list = (*list)[1:]
				if taken[k] {
					continue
				}
				taken[k] = true
				h.Keys = append(h.Keys, KeyHeat{Key: k, Scope: classify(k, w), PerJob: perJob[k], PerDaemonSecond: perDS[k]})
				break
			}
		}
	}
	scope := func(k string) string { return classify(k, w) }
	h.IdleDaemons = idleSaturation(perDS, scope)
	for _, n := range heatSites {
		if s := jobSaturation(perJob, scope, len(w.sites), n); s != nil {
			h.JobsPerSecond = append(h.JobsPerSecond, *s)
		}
	}
	return h
}

// scaled is every key's capacity over n (jobs or daemon-seconds).
func scaled(keys map[string]Capacity, n float64) map[string]Capacity {
	if n <= 0 || len(keys) == 0 {
		return nil
	}
	out := make(map[string]Capacity, len(keys))
	for k, c := range keys {
		out[k] = Capacity{Calls: c.Calls, ReadUnits: c.ReadUnits / n, WriteUnits: c.WriteUnits / n, IndexWrite: c.IndexWrite / n}
	}
	return out
}

// byLoad is the keys, hottest first (ties by name, so runs compare).
func byLoad(keys map[string]Capacity) []string {
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y string) int {
		if c := cmp.Compare(load(keys[y]), load(keys[x])); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	return out
}

// idleSaturation is the idle fleet at which the first key saturates. A
// shared key's load grows with the fleet: it saturates at limit / (its
// capacity per daemon-second) daemons, reads and writes apart. A key of
// one site, owner or runner carries only its own daemons' load, which a
// larger fleet does not raise, so it never saturates this way.
func idleSaturation(perDS map[string]Capacity, scope func(string) string) *Saturation {
	var best *Saturation
	for k, c := range perDS {
		if scope(k) != "shared" {
			continue
		}
		for _, s := range []Saturation{{Key: k, Reads: true, At: limitOver(partitionRCU, c.ReadUnits)}, {Key: k, At: limitOver(partitionWCU, c.WriteUnits)}} {
			if s.At > 0 && (best == nil || s.At < best.At || s.At == best.At && s.Key < best.Key) {
				best = &s
			}
		}
	}
	return best
}

// jobSaturation is the job rate, spread evenly over sites, at which the
// first key saturates. A job's own key carries one job, never more. A
// shared key takes every job's share: it saturates
// at limit / (its capacity per job) jobs/s whatever the number of sites.
// A key of one site, owner or runner took its part of the workload's jobs
// over workloadSites sites; in a fleet of sites in the workload's
// proportions it takes workloadSites / sites of that, so it saturates at
// limit × sites / (workloadSites × its capacity per job).
func jobSaturation(perJob map[string]Capacity, scope func(string) string, workloadSites, sites int) *Saturation {
	var best *Saturation
	for k, c := range perJob {
		f := 1.0
		switch scope(k) {
		case "job":
			continue
		case "site", "owner", "runner":
			f = float64(sites) / float64(workloadSites)
		}
		for _, s := range []Saturation{{Sites: sites, Key: k, Reads: true, At: f * limitOver(partitionRCU, c.ReadUnits)}, {Sites: sites, Key: k, At: f * limitOver(partitionWCU, c.WriteUnits)}} {
			if s.At > 0 && (best == nil || s.At < best.At || s.At == best.At && s.Key < best.Key) {
				best = &s
			}
		}
	}
	return best
}

// limitOver is limit / rate, or 0 (never) when rate is 0.
func limitOver(limit, rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return limit / rate
}

// indexWrites is a write call's index maintenance by index, as the call
// reports it (the same units consumed counts as IndexWrite).
func indexWrites(result any) map[string]float64 {
	cs, write := reported(result)
	if !write {
		return nil
	}
	out := map[string]float64{}
	for _, u := range cs {
		for name, ix := range u.GlobalSecondaryIndexes {
			out[name] += indexUnits(ix)
		}
	}
	return out
}

// indexKeysWritten is, by index, the index partitions a write call names
// for its items: the index's key attribute in a Put's item, or set by an
// Update's SET (name = :value). An entry leaving an index (REMOVE, or a
// Delete) names no partition in the request.
func indexKeysWritten(params any) map[string][]string {
	out := map[string][]string{}
	fromItem := func(item map[string]types.AttributeValue) {
		for index := range hashKeys {
			if index == "" {
				continue
			}
			if v, ok := item[hashKeys[index]].(*types.AttributeValueMemberS); ok {
				out[index] = append(out[index], keyName(index, v.Value))
			}
		}
	}
	fromUpdate := func(expr *string, names map[string]string, values map[string]types.AttributeValue) {
		for index := range hashKeys {
			if index == "" {
				continue
			}
			if k := queryKey(index, derefString(expr), names, values); k != keyUnknown {
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

// keyShares is how one call's capacity is counted by partition key. Each
// index's maintenance goes to the index partitions the call names for it
// (indexKeysWritten), equally; maintenance the request names no partition
// for (an entry removed) stays with the items' own keys. The rest is
// shared equally over the items' own keys (callKeys, share). Every unit
// lands on exactly one key, so the keys add up to the call.
func keyShares(keys []string, c Capacity, byIndex map[string]float64, named map[string][]string) map[string]Capacity {
	out := map[string]Capacity{}
	rest := c
	for index, u := range byIndex {
		ks := named[index]
		if u <= 0 || len(ks) == 0 {
			continue
		}
		rest.WriteUnits -= u
		rest.IndexWrite -= u
		part := share(Capacity{Calls: c.Calls, WriteUnits: u, IndexWrite: u}, len(ks))
		for _, k := range ks {
			add := out[k]
			add.add(part)
			out[k] = add
		}
	}
	if len(keys) == 0 {
		keys = []string{keyUnknown}
	}
	part := share(rest, len(keys))
	for _, k := range keys {
		add := out[k]
		add.add(part)
		out[k] = add
	}
	return out
}
