package bench

import (
	"cmp"
	"slices"
	"strings"

	"github.com/byorelay/byorelay/internal/bench/partkey"
	"github.com/byorelay/byorelay/store/dynamo"
)

// DynamoDB serves each partition key from one partition, which takes at
// most 3,000 RCU and 1,000 WCU a second; one item cannot be split, so a key
// every request reads or writes caps the whole fleet however the table
// scales. The meter therefore also counts every call by the exact partition
// key(s) it touches (package partkey names them), so the bench can name the
// hottest keys and the fleet size at which the first of them saturates.
const (
	partitionRCU = 3000.0
	partitionWCU = 1000.0
)

// share is one item's part of a call's capacity when the call touches n
// items: the call's units over its items, equally. DynamoDB reports a
// transaction's or batch's capacity per table, not per item; the store's
// multi-item calls write small items of like size, so equal shares are
// close, and they keep every key's total summing to the call's.
func share(c Capacity, n int) Capacity {
	f := 1 / float64(n)
	return Capacity{Calls: c.Calls, ReadUnits: c.ReadUnits * f, WriteUnits: c.WriteUnits * f, IndexWrite: c.IndexWrite * f}
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
	h.IdleDaemons = idleSaturation(spread(perDS), scope)
	spreadJobs := spread(perJob)
	for _, n := range heatSites {
		if s := jobSaturation(spreadJobs, scope, len(w.sites), n); s != nil {
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

// shardFamily is a family of keys one logical key is spread over, each
// call picking its member by a hash of what it names or at random: the
// due index's shards (by job, or in turn from a random start) and the
// clock probe's (at random, per container).
type shardFamily struct {
	prefix string // the members are prefix + a shard number
	shards int
}

var shardFamilies = []shardFamily{
	{"due:D#", dynamo.DefaultDueShards},
	{"due:ED#", dynamo.DefaultDueShards},
	{"due:SD#", dynamo.DefaultDueShards},
	{"CLOCK#probe#", dynamo.ClockProbeShards},
}

// siteShardFamilies are the per-site families: one site's unsealed sets
// and finished list, each spread over shards by a hash of the owner or the
// job id (store/dynamo unsealedPK, finishedKey). A member is named
// prefix + site, for shard 0, or prefix + site + "/" + the shard number
// (partkey prints the NUL between them as "/"); the family is named
// prefix + site + "/*".
var siteShardFamilies = []shardFamily{
	{"U#", dynamo.DefaultUnsealedShards},
	{"due:F#", dynamo.DefaultFinishedShards},
}

// siteFamilyOf is the family key belongs to among siteShardFamilies: its
// name and shard count.
func siteFamilyOf(key string) (name string, shards int, ok bool) {
	for _, f := range siteShardFamilies {
		rest, found := strings.CutPrefix(key, f.prefix)
		if !found || rest == "" {
			continue
		}
		if i := strings.LastIndexByte(rest, '/'); i > 0 && i < len(rest)-1 && strings.Trim(rest[i+1:], "0123456789") == "" {
			rest = rest[:i]
		}
		return f.prefix + rest + "/*", f.shards, true
	}
	return "", 0, false
}

// spread gives every member of a shard family the family's total over its
// shard count, for the saturation estimates: at fleet scale a hash or a
// random pick spreads the family's load evenly, whichever members the
// bench's sample happened to touch (one container's one clock probe read
// lands on one member of 256, which the sample would bill as if every
// container read it). The table of hottest keys keeps each exact key's
// measured load.
func spread(keys map[string]Capacity) map[string]Capacity {
	if len(keys) == 0 {
		return keys
	}
	out := make(map[string]Capacity, len(keys))
	totals := map[int]Capacity{}
	type siteTotal struct {
		c      Capacity
		shards int
	}
	siteTotals := map[string]siteTotal{}
	for k, c := range keys {
		if name, shards, ok := siteFamilyOf(k); ok {
			t := siteTotals[name]
			t.c.add(c)
			t.shards = shards
			siteTotals[name] = t
			continue
		}
		if f, ok := familyOf(k); ok {
			t := totals[f]
			t.add(c)
			totals[f] = t
			continue
		}
		out[k] = c
	}
	for f, t := range totals {
		n := float64(shardFamilies[f].shards)
		each := Capacity{Calls: t.Calls, ReadUnits: t.ReadUnits / n, WriteUnits: t.WriteUnits / n, IndexWrite: t.IndexWrite / n}
		// One name stands for every member: "<prefix>*".
		out[shardFamilies[f].prefix+"*"] = each
	}
	for name, t := range siteTotals {
		n := float64(t.shards)
		out[name] = Capacity{Calls: t.c.Calls, ReadUnits: t.c.ReadUnits / n, WriteUnits: t.c.WriteUnits / n, IndexWrite: t.c.IndexWrite / n}
	}
	return out
}

// familyOf is the index in shardFamilies of the family key belongs to.
func familyOf(key string) (int, bool) {
	for i, f := range shardFamilies {
		if rest, ok := strings.CutPrefix(key, f.prefix); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return i, true
		}
	}
	return 0, false
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

// keyShares is how one call's capacity is counted by partition key. Each
// index's maintenance goes to the index partitions the call names for it
// (partkey.IndexWrites), equally; maintenance the request names no partition
// for (an entry removed) stays with the items' own keys. The rest is
// shared equally over the items' own keys (partkey.Of, share). Every unit
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
		keys = []string{partkey.Unknown}
	}
	part := share(rest, len(keys))
	for _, k := range keys {
		add := out[k]
		add.add(part)
		out[k] = add
	}
	return out
}
