package bench

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/bench/partkey"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/store/dynamo"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
}

// A call's capacity is shared equally over its items, an index's
// maintenance goes to the index partitions the call names, and the shares
// add up to the call.
func TestMeterSharesACallOverItsKeys(t *testing.T) {
	m := newCapacityMeter()
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{Item: map[string]types.AttributeValue{"pk": s("a"), "sk": s("j"), "qk": s("Q#1")}}},
		{Update: &types.Update{Key: key("b", "x"), UpdateExpression: aws.String("SET dk = :dk, du = :du REMOVE qk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":dk": s("D#0"), ":du": &types.AttributeValueMemberN{Value: "1"}}}},
		{Update: &types.Update{Key: key("a", "y"), UpdateExpression: aws.String("REMOVE lk")}},
		{ConditionCheck: &types.ConditionCheck{Key: key("c", "z")}},
	}}
	c := Capacity{Calls: 1, ReadUnits: 2, WriteUnits: 14, IndexWrite: 8}
	byIndex := map[string]float64{"queue": 2, "due": 4, "sitelist": 2}
	m.record("F", keyShares(partkey.Of(in), c, byIndex, partkey.IndexWrites(in)), c)
	m.record(notFunction, map[string]Capacity{"a": {Calls: 1, WriteUnits: 100}}, Capacity{Calls: 1, WriteUnits: 100})
	keys := m.snapshotKeys()
	want := map[string]Capacity{
		"queue:Q#1": {Calls: 1, WriteUnits: 2, IndexWrite: 2},
		"due:D#0":   {Calls: 1, WriteUnits: 4, IndexWrite: 4},
		// The rest (2 RCU, 8 WCU of which the removed sitelist entry's 2)
		// over the four items, two of them a's.
		"a": {Calls: 2, ReadUnits: 1, WriteUnits: 4, IndexWrite: 1},
		"b": {Calls: 1, ReadUnits: 0.5, WriteUnits: 2, IndexWrite: 0.5},
		"c": {Calls: 1, ReadUnits: 0.5, WriteUnits: 2, IndexWrite: 0.5},
	}
	if len(keys) != len(want) {
		t.Errorf("keys %v, want %v (calls outside functions under no key)", keys, want)
	}
	var sum Capacity
	for k, got := range keys {
		if got != want[k] {
			t.Errorf("%s: %+v, want %+v", k, got, want[k])
		}
		sum.add(got)
	}
	if sum.WriteUnits != c.WriteUnits || sum.ReadUnits != c.ReadUnits || sum.IndexWrite != c.IndexWrite {
		t.Errorf("shares add up to %+v, want the call's %+v", sum, c)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestSaturationArithmetic(t *testing.T) {
	w := &world{sites: []site{{id: "site-a"}, {id: "site-b"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}}}
	// 100 jobs; 10 idle daemon-seconds.
	lifecycle := map[string]Capacity{
		"V#projection":   {Calls: 1300, ReadUnits: 1300},                // 13 RCU/job, shared
		"S#site-a":       {Calls: 100, ReadUnits: 100, WriteUnits: 300}, // 3 WCU/job, site
		"queue:own-1/xx": {Calls: 100, ReadUnits: 50},
		// One job's item, read by that job alone: never saturates.
		"J#site-a/r0-000-000001": {Calls: 20, WriteUnits: 90},
	}
	idle := &IdlePhase{Daemons: 2, Seconds: 5, Keys: map[string]Capacity{
		"V#projection": {Calls: 4, ReadUnits: 4},                // 0.4 RCU per daemon-second
		"P#run-1":      {Calls: 2, ReadUnits: 1, WriteUnits: 9}, // the runner's own: never saturates with the fleet
	}}
	h := heat(w, 100, lifecycle, idle)
	if h.Keys[0].Key != "V#projection" || h.Keys[0].Scope != "shared" || !near(h.Keys[0].PerJob.ReadUnits, 13) || !near(h.Keys[0].PerDaemonSecond.ReadUnits, 0.4) {
		t.Errorf("hottest key %+v", h.Keys[0])
	}
	if len(h.Keys) != 5 {
		t.Errorf("%d keys, want the 5 distinct keys of both phases", len(h.Keys))
	}
	for _, k := range h.Keys {
		want := map[string]string{"V#projection": "shared", "S#site-a": "site", "queue:own-1/xx": "owner", "P#run-1": "runner", "J#site-a/r0-000-000001": "job"}[k.Key]
		if k.Scope != want {
			t.Errorf("%s: scope %s, want %s", k.Key, k.Scope, want)
		}
	}
	// 3000 RCU/s over 0.4 RCU per daemon-second.
	if s := h.IdleDaemons; s == nil || s.Key != "V#projection" || !s.Reads || !near(s.At, 7500) {
		t.Errorf("idle saturation %+v, want V#projection reads at 7500 daemons", s)
	}
	// Shared: 3000/13 = 230.8 jobs/s at any size. The site key took half
	// the jobs at 6 WCU each: 1000 WCU/s over 3 WCU/job, times sites/2:
	// 166.7 at one site (first there), 1666.7 at ten.
	want := map[int]Saturation{
		1:  {Sites: 1, Key: "S#site-a", At: 1000.0 / 3 / 2},
		10: {Sites: 10, Key: "V#projection", Reads: true, At: 3000.0 / 13},
	}
	for _, s := range h.JobsPerSecond {
		if x, ok := want[s.Sites]; ok && (x.Key != s.Key || x.Reads != s.Reads || !near(x.At, s.At)) {
			t.Errorf("at %d sites: %+v, want %+v", s.Sites, s, x)
		}
	}
	if len(h.JobsPerSecond) != len(heatSites) {
		t.Errorf("%d fleet sizes, want %d", len(h.JobsPerSecond), len(heatSites))
	}
}

// A shard family's load is spread over all its shards for the saturation
// estimates, whichever members the sample touched; the table keeps the
// exact keys.
func TestSaturationSpreadsAShardFamily(t *testing.T) {
	w := &world{sites: []site{{id: "site-a"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}}}
	// One container's one probe read, on one member, in 10 daemon-seconds;
	// and due index writes on two of the request shards.
	idle := &IdlePhase{Daemons: 2, Seconds: 5, Keys: map[string]Capacity{
		"CLOCK#probe#146": {Calls: 1, ReadUnits: 0.5},
	}}
	lifecycle := map[string]Capacity{
		"due:D#3":  {Calls: 10, WriteUnits: 400},
		"due:D#7":  {Calls: 10, WriteUnits: 200},
		"due:D#7x": {Calls: 1, WriteUnits: 1}, // not a member: its suffix is not a shard number
	}
	h := heat(w, 100, lifecycle, idle)
	if h.Keys[0].Key != "CLOCK#probe#146" && h.Keys[0].Key != "due:D#3" {
		t.Errorf("the table names %q first, want a measured key", h.Keys[0].Key)
	}
	// 0.05 RCU per daemon-second over 256 shards: 3000 × 256 / 0.05.
	if s := h.IdleDaemons; s == nil || s.Key != "CLOCK#probe#*" || !near(s.At, 3000*float64(dynamo.ClockProbeShards)/0.05) {
		t.Errorf("idle saturation %+v, want the probe family at %v daemons", s, 3000*float64(dynamo.ClockProbeShards)/0.05)
	}
	// 6 WCU per job over the due shards: 1000 × shards / 6 jobs/s; the
	// non-member, 0.01 WCU per job on its own, saturates at 100,000.
	for _, s := range h.JobsPerSecond {
		if s.Sites != 1 {
			continue
		}
		family := 1000 * float64(dynamo.DefaultDueShards) / 6
		other := 1000 / 0.01
		want := min(family, other)
		if !near(s.At, want) {
			t.Errorf("at one site: %+v, want %v jobs/s", s, want)
		}
	}
}

// One site's saturation counts the keys that grow with the site, its own
// and the shared ones; an owner's key (a (site, owner) pair's too), a
// runner's and a job's carry no more as the site gains devices. A
// per-site shard family is spread over its shards.
func TestOneSiteSaturationCountsWhatGrowsWithTheSite(t *testing.T) {
	withUnsealedShards(t, 16)
	w := &world{sites: []site{{id: "one-site"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}, {runnerID: "run-2", owner: "own-2"}}}
	// 100 jobs; 10 idle daemon-seconds.
	lifecycle := map[string]Capacity{
		"VS#one-site":                {Calls: 700, ReadUnits: 700}, // 7 RCU/job: 428.6 jobs/s
		"V#projection":               {Calls: 100, ReadUnits: 200}, // 2 RCU/job, shared: 1,500 jobs/s
		"queue:Q#one-site/own-1/gen": {Calls: 100, WriteUnits: 500},
		"P#run-1":                    {Calls: 100, WriteUnits: 500},
		"J#one-site/one-000-000001":  {Calls: 100, WriteUnits: 900},
		"U#one-site#3":               {Calls: 100, WriteUnits: 100}, // with #5: 4 WCU/job over 16 shards
		"U#one-site#5":               {Calls: 100, WriteUnits: 300},
		"due:F#one-site":             {Calls: 100, WriteUnits: 20},
	}
	idle := &IdlePhase{Daemons: 2, Seconds: 5, Keys: map[string]Capacity{
		"VS#one-site": {Calls: 2, ReadUnits: 2},   // 0.2 RCU per daemon-second: 15,000 devices
		"P#run-1":     {Calls: 2, WriteUnits: 10}, // the runner's own
	}}
	one := func() *OneSitePhase { return &OneSitePhase{Idle: idle, Lifecycle: Phase{Jobs: 100, Keys: lifecycle}} }
	h := siteHeat(w, one())
	if h == nil || h.SiteID != "one-site" {
		t.Fatalf("site heat %+v", h)
	}
	if s := h.IdleDevices; s == nil || s.Key != "VS#one-site" || !s.Reads || !near(s.At, 15000) {
		t.Errorf("idle devices %+v, want VS#one-site reads at 15000", s)
	}
	if s := h.JobsPerSecond; s == nil || s.Key != "VS#one-site" || !s.Reads || !near(s.At, 3000.0/7) {
		t.Errorf("jobs/s %+v, want VS#one-site reads at %v", s, 3000.0/7)
	}
	for _, k := range h.Keys {
		if k.Key == "queue:Q#one-site/own-1/gen" && k.Scope != "owner" {
			t.Errorf("a (site, owner) pair's key is scoped %s, want owner", k.Scope)
		}
	}

	// Without the site record: the spread unsealed family (4 WCU/job over
	// 16 shards, 4,000 jobs/s) comes after the shared key's 1,500.
	delete(lifecycle, "VS#one-site")
	if s := siteHeat(w, one()).JobsPerSecond; s == nil || s.Key != "V#projection" || !near(s.At, 1500) {
		t.Errorf("jobs/s without the site record %+v, want V#projection at 1500", s)
	}
	delete(lifecycle, "V#projection")
	if s := siteHeat(w, one()).JobsPerSecond; s == nil || s.Key != "U#one-site#*" || s.Reads || !near(s.At, 4000) {
		t.Errorf("jobs/s of the unsealed family %+v, want U#one-site#* writes at 4000", s)
	}
}

// withUnsealedShards has the estimates spread a site's unsealed sets over
// n shards for the test, whatever the store's default.
func withUnsealedShards(t *testing.T, n int) {
	saved := partkey.Families
	t.Cleanup(func() { partkey.Families = saved })
	partkey.Families = slices.Clone(saved)
	for i, f := range partkey.Families {
		if f.Prefix == "U#" {
			partkey.Families[i].Shards = n
		}
	}
}

// A site's polls are modelled on a timer: their empty cost a second at
// the stock period, and what each listed row adds, apart from the job's
// other calls, which grow with its jobs.
func TestOneSitePollsGrowWithThePollRateNotTheJobs(t *testing.T) {
	withUnsealedShards(t, 16)
	w := &world{sites: []site{{id: "one-site"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}}}
	// 100 jobs, each polled once: 16 RCU a poll on the sets (1,600), 1 RCU
	// more a listed row (100 rows), and 2 WCU a job from claim and seal.
	one := &OneSitePhase{
		EmptyPolls: &SitePolls{Polls: 20, Keys: map[string]Capacity{pollKey("pending", "U#one-site/3"): {Calls: 320, ReadUnits: 320}}},
		Lifecycle: Phase{Jobs: 100, PendingRows: 100, Latency: map[string]Latency{"pending": {Count: 100}},
			Keys:     map[string]Capacity{"U#one-site/3": {Calls: 1800, ReadUnits: 1700, WriteUnits: 200}},
			PollKeys: map[string]Capacity{pollKey("pending", "U#one-site/3"): {Calls: 1600, ReadUnits: 1700}}},
	}
	m := newSiteLoad(one)
	fam := "U#one-site/*"
	// A shard at J jobs/s: J × 2 / 16 WCU; 4 polls × 16 / 16 RCU, and
	// 1 / 16 RCU a row, pendingListings rows a job.
	for _, j := range []float64{0, 1000, 10000} {
		got := m.atJobs(fam, j)
		if want := 4 + j*pendingListings/16; !near(got.ReadUnits, want) || !near(got.WriteUnits, j*2/16) {
			t.Errorf("at %v jobs/s: %+v, want %v RCU and %v WCU", j, got, want, j*2/16)
		}
	}
	h := siteHeat(w, one)
	if s := h.JobsPerSecond; s == nil || s.Key != fam || s.Reads || !near(s.At, 8000) {
		t.Errorf("jobs/s %+v, want %s writes at 8000", s, fam)
	}
	if g := h.JobsGoal; g == nil || g.Key != fam || g.Reads || !near(g.Share, 1.25) {
		t.Errorf("at the goal %+v, want %s writes at 125%%", g, fam)
	}
	// An idle site polls too: its empty polls, nothing else.
	if got := m.atDevices(fam, 1e6); !near(got.ReadUnits, 4) || got.WriteUnits != 0 {
		t.Errorf("idle: %+v, want 4 RCU", got)
	}
}

// A results page lists the fresh window's share, or the recent window up
// to its bound, and the rotation's share.
func TestResultsRowsPerPoll(t *testing.T) {
	for _, c := range []struct{ rate, rows float64 }{{0, 10}, {1, 20}, {8, 50}, {100, 510}, {10_000, 4010}} {
		if got := resultsRowsPerPoll(c.rate); !near(got, c.rows) {
			t.Errorf("at %v jobs/s: %v rows a poll, want %v", c.rate, got, c.rows)
		}
	}
}

// The verdicts read the one-site model's hottest key's share of its limit
// at a million devices and at 10,000 jobs/s, naming where the first key
// saturates.
func TestOneSiteVerdicts(t *testing.T) {
	rep := &Report{Targets: map[string]*TargetReport{TargetDynamo: {
		OneSite: &OneSitePhase{SiteID: "one-site", Idle: &IdlePhase{Daemons: 2, Seconds: 10}, Lifecycle: Phase{Jobs: 100}},
		Heat: &Heat{OneSite: &SiteHeat{SiteID: "one-site",
			IdleDevices:   &Saturation{Key: "VS#one-site", Reads: true, At: 15000},
			IdleGoal:      &KeyShare{Key: "VS#one-site", Reads: true, Share: 66.667},
			JobsPerSecond: &Saturation{Key: "U#one-site#*", At: 40000},
			JobsGoal:      &KeyShare{Key: "U#one-site#*", Share: 0.25},
			AtGoal:        []KeyLoad{{Key: "U#one-site#*", PerSecond: Capacity{ReadUnits: 6, WriteUnits: 250}}}}},
	}}}
	md := rep.Markdown()
	for _, want := range []string{
		"| one site with 1,000,000 idle consenting devices (default heartbeat), polling as a stock site, puts no partition above 50%: the hottest key's share of its limit | 6666.7% (`VS#one-site` reads; the first key at its limit: `VS#one-site` reads, from 15000 devices) | ≤ 50% | no |",
		"| one site at 10,000 jobs/s, polling as a stock site, puts no partition above 50%: the hottest key's share of its limit | 25.0% (`U#one-site#*` writes; the first key at its limit: `U#one-site#*` writes, from 40000 jobs/s) | ≤ 50% | yes |",
		"| one site: idle devices consenting to it, at the default heartbeat | `VS#one-site` (reads) | 15000 devices |",
		"| one site: its jobs/s | `U#one-site#*` (writes) | 40000 jobs/s |",
		"| `U#one-site#*` | 6.0 | 250.0 | 25.0% |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

// A site's read copies are spread as a family of that site: its load over
// the copy count, still the site's.
func TestSaturationSpreadsASitesCopies(t *testing.T) {
	w := &world{sites: []site{{id: "site-a"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}}}
	idle := &IdlePhase{Daemons: 2, Seconds: 5, Keys: map[string]Capacity{
		"VSC#site-a/3":  {Calls: 1, ReadUnits: 1},
		"VSC#site-a/40": {Calls: 1, ReadUnits: 1},
	}}
	spreadKeys := spread(scaled(idle.Keys, idle.DaemonSeconds()))
	got, ok := spreadKeys["VSC#site-a/*"]
	if !ok || len(spreadKeys) != 1 {
		t.Fatalf("spread keys %v, want the one family VSC#site-a/*", spreadKeys)
	}
	if want := 0.2 / float64(controlplane.DefaultSiteCopies); !near(got.ReadUnits, want) {
		t.Errorf("the family's reads per copy %v, want %v", got.ReadUnits, want)
	}
	if scope := classify("VSC#site-a/*", w); scope != "site" {
		t.Errorf("the family's scope is %q, want site", scope)
	}
}

// A site's unsealed sets and finished list are shard families of that
// site: every member (shard 0 is the bare key) adds to the family's load,
// which the estimates spread over the store's default count, per site.
func TestSaturationSpreadsASitesShards(t *testing.T) {
	for _, c := range []struct {
		key    string
		family string
		ok     bool
	}{
		{"U#site-a", "U#site-a/*", true},
		{"U#site-a/5", "U#site-a/*", true},
		{"U#site-01", "U#site-01/*", true},
		{"due:F#site-a/63", "due:F#site-a/*", true},
		{"due:F#site-a", "due:F#site-a/*", true},
		{"due:D#3", "due:D#*", true},
		{"VS#site-a", "", false},
	} {
		name, _, ok := partkey.FamilyOf(c.key)
		if ok != c.ok || name != c.family {
			t.Errorf("FamilyOf(%q) = %q, %v; want %q, %v", c.key, name, ok, c.family, c.ok)
		}
	}
	w := &world{sites: []site{{id: "site-a"}}, daemons: []daemon{{runnerID: "run-1", owner: "own-1"}}}
	lifecycle := map[string]Capacity{
		"U#site-a":        {Calls: 10, WriteUnits: 30},
		"U#site-a/9":      {Calls: 10, WriteUnits: 30},
		"due:F#site-a/17": {Calls: 10, WriteUnits: 100},
	}
	h := heat(w, 100, lifecycle, nil)
	// 0.6 WCU per job over the set shards, 1 over the finished shards, at
	// one site: whichever saturates first.
	sets := 1000 * float64(dynamo.DefaultUnsealedShards) / 0.6
	finished := 1000 * float64(dynamo.DefaultFinishedShards) / 1
	for _, s := range h.JobsPerSecond {
		if s.Sites == 1 && !near(s.At, min(sets, finished)) {
			t.Errorf("at one site: %+v, want %v jobs/s", s, min(sets, finished))
		}
	}
}
