package bench

import (
	"cmp"
	"slices"
	"strings"

	"github.com/byorelay/byorelay/internal/bench/partkey"
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
	// OneSite is the one-site phase's: every daemon consenting to one
	// site, every job that site's.
	OneSite *SiteHeat `json:"oneSite,omitempty"`
}

// SiteHeat is one site's hottest keys and where the first of them
// saturates as the site grows. A site grows by more people, so by more
// owners and devices: a key of one owner or runner (a (site, owner) pair's
// among them) carries the same load however large the site, while the
// site's own keys and the shared ones carry all of it.
type SiteHeat struct {
	SiteID string    `json:"siteId"`
	Keys   []KeyHeat `json:"keys"`
	// IdleDevices is the number of idle devices consenting to the site, at
	// the default heartbeat, at which the first key saturates.
	IdleDevices *Saturation `json:"idleDevices,omitempty"`
	// JobsPerSecond is the site's job rate at which the first key
	// saturates.
	JobsPerSecond *Saturation `json:"jobsPerSecond,omitempty"`
	// IdleGoal and JobsGoal are the hottest key's share of its limit at
	// the goals' loads (goalOneSiteDevices, goalOneSiteJobs), and AtGoal
	// the hottest keys' load a second at goalOneSiteJobs.
	IdleGoal *KeyShare `json:"idleGoal,omitempty"`
	JobsGoal *KeyShare `json:"jobsGoal,omitempty"`
	AtGoal   []KeyLoad `json:"atGoal,omitempty"`
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
// A key holding one of the workload's owner or runner ids is that
// entity's, and one holding a site id (and no owner's) that site's: a
// fleet grown in the workload's proportions spreads such keys' load over
// more of them. A key of a (site, owner) pair, like a queue's, is the
// owner's: a site grows by more owners, each pair carrying one owner's
// load. Any other key is shared by the whole fleet.
func classify(key string, w *world) string {
	if jobIDs.MatchString(key) {
		return "job"
	}
	for _, d := range w.daemons {
		if strings.Contains(key, d.owner) {
			return "owner"
		}
		if strings.Contains(key, d.runnerID) {
			return "runner"
		}
	}
	for _, s := range w.sites {
		if strings.Contains(key, s.id) {
			return "site"
		}
	}
	return "shared"
}

// load is the larger of a capacity's reads and writes as a fraction of
// one partition's limits per second.
func load(c Capacity) float64 { return max(c.ReadUnits/partitionRCU, c.WriteUnits/partitionWCU) }

// heat ranks the keys of a lifecycle phase (per job) and an idle phase
// (per daemon-second), hottest, and estimates where the first saturates.
// Either phase may be missing (nil keys).
func heat(w *world, jobs int, lifecycle map[string]Capacity, idle *IdlePhase) *Heat {
	perJob, perDS := perUnit(jobs, lifecycle, idle)
	if len(perJob) == 0 && len(perDS) == 0 {
		return nil
	}
	h := &Heat{Keys: hottest(w, perJob, perDS)}
	scope := func(k string) string { return classify(k, w) }
	h.IdleDaemons = firstLimit(spread(perDS), func(k string) bool { return scope(k) == "shared" })
	spreadJobs := spread(perJob)
	for _, n := range heatSites {
		if s := jobSaturation(spreadJobs, scope, len(w.sites), n); s != nil {
			h.JobsPerSecond = append(h.JobsPerSecond, *s)
		}
	}
	return h
}

// siteHeat is heat for a workload of one site (w has one): its hottest
// keys, and the idle devices consenting to it and its jobs/s at which the
// first key saturates, with the site polling as a stock site does
// (siteLoad). Those loads put all their weight on the site's own keys and
// the shared ones; a job's, an owner's or a runner's key carries no more
// as the site grows (SiteHeat).
func siteHeat(w *world, one *OneSitePhase) *SiteHeat {
	if one == nil || one.Lifecycle.Jobs == 0 && one.Idle == nil {
		return nil
	}
	m := newSiteLoad(one)
	if len(m.perJob) == 0 && len(m.perDS) == 0 {
		return nil
	}
	grows := func(k string) bool {
		s := classify(k, w)
		return s == "site" || s == "shared"
	}
	keys := m.keys()
	h := &SiteHeat{SiteID: w.sites[0].id, Keys: hottest(w, m.perJob, m.perDS),
		IdleDevices:   firstAt(keys, grows, m.atDevices),
		JobsPerSecond: firstAt(keys, grows, m.atJobs),
		JobsGoal:      hottestAt(keys, grows, func(k string) Capacity { return m.atJobs(k, goalOneSiteJobs) }),
	}
	if one.Idle != nil {
		h.IdleGoal = hottestAt(keys, grows, func(k string) Capacity { return m.atDevices(k, goalOneSiteDevices) })
	}
	for _, k := range keys {
		if grows(k) {
			h.AtGoal = append(h.AtGoal, KeyLoad{Key: k, PerSecond: m.atJobs(k, goalOneSiteJobs)})
		}
	}
	slices.SortFunc(h.AtGoal, func(x, y KeyLoad) int {
		if c := cmp.Compare(load(y.PerSecond), load(x.PerSecond)); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	h.AtGoal = h.AtGoal[:min(len(h.AtGoal), hotKeys)]
	return h
}

// KeyLoad is a key's capacity a second under one load.
type KeyLoad struct {
	Key       string   `json:"key"`
	PerSecond Capacity `json:"perSecond"`
}

// perUnit is a lifecycle phase's keys per job and an idle phase's per
// daemon-second.
func perUnit(jobs int, lifecycle map[string]Capacity, idle *IdlePhase) (perJob, perDS map[string]Capacity) {
	perJob = scaled(lifecycle, float64(jobs))
	if idle != nil {
		perDS = scaled(idle.Keys, idle.DaemonSeconds())
	}
	return perJob, perDS
}

// hottest is the hottest of each list in turn, by load, until hotKeys are
// taken, so the idle fleet's keys show beside the jobs'.
func hottest(w *world, perJob, perDS map[string]Capacity) []KeyHeat {
	var out []KeyHeat
	taken := map[string]bool{}
	a, b := byLoad(perJob), byLoad(perDS)
	for len(out) < hotKeys && (len(a) > 0 || len(b) > 0) {
		for _, list := range []*[]string{&a, &b} {
			for len(*list) > 0 && len(out) < hotKeys {
				k := (*list)[0]
				*list = (*list)[1:]
				if taken[k] {
					continue
				}
				taken[k] = true
				out = append(out, KeyHeat{Key: k, Scope: classify(k, w), PerJob: perJob[k], PerDaemonSecond: perDS[k]})
				break
			}
		}
	}
	return out
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

// spread gives every member of a shard family (partkey.Families) the
// family's total over its shard count, for the saturation estimates: at
// fleet scale a hash or a random pick spreads the family's load evenly,
// whichever members the bench's sample happened to touch (one container's
// one clock probe read lands on one member of 256, which the sample would
// bill as if every container read it). One name stands for the members,
// "<prefix>*" (one per site for a family of per-site keys). The table of
// hottest keys keeps each exact key's measured load.
func spread(keys map[string]Capacity) map[string]Capacity {
	if len(keys) == 0 {
		return keys
	}
	out := make(map[string]Capacity, len(keys))
	totals := map[string]Capacity{}
	shards := map[string]int{}
	for k, c := range keys {
		if name, n, ok := partkey.FamilyOf(k); ok {
			t := totals[name]
			t.add(c)
			totals[name], shards[name] = t, n
			continue
		}
		out[k] = c
	}
	for name, t := range totals {
		n := float64(shards[name])
		out[name] = Capacity{Calls: t.Calls, ReadUnits: t.ReadUnits / n, WriteUnits: t.WriteUnits / n, IndexWrite: t.IndexWrite / n}
	}
	return out
}

// firstLimit is the load at which the first key that grows with it
// reaches a partition's reads or writes: per holds each key's capacity per
// unit of load (a daemon-second, a job), and a key that grows saturates at
// limit / its capacity per unit, reads and writes apart. Keys that do
// not grow carry only their own entity's load, which a larger load does
// not raise. The idle fleet's estimate counts the shared keys alone: a
// key of one site, owner or runner carries only its own daemons' load.
func firstLimit(per map[string]Capacity, grows func(string) bool) *Saturation {
	var best *Saturation
	for k, c := range per {
		if !grows(k) {
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
