package bench

import (
	"context"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/store"
)

// A stock site (@byollm/server's pump, siteserver's, the site pump's)
// reads pending and results on a timer, not once a job: what those polls
// cost a key grows with the poll rate and with the rows each answer lists,
// while the rest of a job's calls grow with the job rate. The one-site
// estimates model the site so (siteLoad), from what the bench counted by
// partition key: the polls' cost by poll function apart from the rest
// (capacityMeter.polls), a poll's cost with nothing to list (SitePolls),
// and what each listed row adds (the lifecycle's polls beyond that).
const (
	// pollEvery is a stock site's poll period: @byollm/server's pump and
	// siteserver's loop read pending and results every 250 ms.
	pollEvery = 250 * time.Millisecond
	// pendingListings is how many pending answers list one job: the first
	// poll after its claim, and one more while its seal is on its way.
	// The pump seals what a poll lists before its next poll, so two is a
	// bound, not a mean.
	pendingListings = 2
	// emptyPolls is how many polls of each the SitePolls phase makes.
	emptyPolls = 20
)

// SitePolls is a site polling pending and results at pollEvery with
// nothing to list: what one poll of each costs each key, whatever the
// site's rate.
type SitePolls struct {
	// Polls is how many of each were made, and Failed how many answered
	// other than 200.
	Polls  int `json:"polls"`
	Failed int `json:"failed"`
	// Keys is by pollKey.
	Keys map[string]Capacity `json:"-"`
}

// runSitePolls polls pending and results n times each, pollEvery apart, as
// an idle stock site does.
func runSitePolls(ctx context.Context, t target, s site, n int) SitePolls {
	c := newClient(t.origin()).worker()
	defer c.close()
	before := t.pollCapacity()
	p := SitePolls{}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for range n {
		for _, ep := range pollEndpoints {
			if _, err := c.siteCall(ctx, s, ep, nil); err != nil {
				p.Failed++
			}
		}
		p.Polls++
		select {
		case <-ctx.Done():
			return p
		case <-tick.C:
		}
	}
	p.Keys = capacitySince(t.pollCapacity(), before)
	return p
}

// siteLoad is one site's load on each key, spread over its shard family
// (spread), as the sum of parts that each grow with one thing.
type siteLoad struct {
	// perJob is every call but the site's polls, per job of the lifecycle.
	perJob map[string]Capacity
	// perDS is the idle phase's, per daemon-second.
	perDS map[string]Capacity
	// pollBase is a second of polling each of pending and results at
	// pollEvery with nothing listed.
	pollBase map[string]Capacity
	// pendingRow and resultsRow are what one listed row adds to a poll.
	pendingRow, resultsRow map[string]Capacity
}

// newSiteLoad builds the model from the one-site phase's counts.
// A row's cost is the lifecycle's poll capacity beyond its polls' empty
// cost, over the rows they listed (none below zero): DynamoDB bills a
// Query by 4 KB of what it read, so rows that fit in the empty poll's
// first unit cost nothing here, and a poll listing thousands pays for
// them, a few RCU a shard (docs/performance.md, "One site").
func newSiteLoad(one *OneSitePhase) siteLoad {
	life := one.Lifecycle
	m := siteLoad{}
	jobKeys := map[string]Capacity{}
	for k, c := range life.Keys {
		jobKeys[k] = c
	}
	lifePolls := map[string]map[string]Capacity{}
	for pk, c := range life.PollKeys {
		fn, k := splitPollKey(pk)
		jobKeys[k] = jobKeys[k].minus(c)
		if lifePolls[fn] == nil {
			lifePolls[fn] = map[string]Capacity{}
		}
		lifePolls[fn][k] = c
	}
	m.perJob = spread(scaled(positive(jobKeys), float64(life.Jobs)))
	if one.Idle != nil {
		m.perDS = spread(scaled(one.Idle.Keys, one.Idle.DaemonSeconds()))
	}
	base := map[string]map[string]Capacity{}
	if e := one.EmptyPolls; e != nil && e.Polls > 0 {
		for pk, c := range e.Keys {
			fn, k := splitPollKey(pk)
			if base[fn] == nil {
				base[fn] = map[string]Capacity{}
			}
			base[fn][k] = c.times(1 / float64(e.Polls))
		}
	}
	perSecond := float64(time.Second) / float64(pollEvery)
	m.pollBase = map[string]Capacity{}
	for _, b := range base {
		for k, c := range b {
			add := m.pollBase[k]
			add.add(c.times(perSecond))
			m.pollBase[k] = add
		}
	}
	m.pollBase = spread(m.pollBase)
	row := func(fn string, rows int64) map[string]Capacity {
		polls := float64(life.Latency[fn].Count)
		if rows <= 0 {
			return nil
		}
		out := map[string]Capacity{}
		for k, c := range lifePolls[fn] {
			out[k] = c.minus(base[fn][k].times(polls)).times(1 / float64(rows))
		}
		return spread(positive(out))
	}
	m.pendingRow, m.resultsRow = row("pending", life.PendingRows), row("results", life.ResultsRows)
	return m
}

// resultsRowsPerPoll is how many rows a results GET lists for a site
// finishing jobsPerSecond, as the page is bounded (store.ResultsPage): the
// fresh window's share of a page, or every result of the recent window
// if more, up to ResultsRecentMax, and the rotation's share.
func resultsRowsPerPoll(jobsPerSecond float64) float64 {
	rotated := float64(store.ResultsRotated(relay.ResultsPageJobs))
	fresh := min(jobsPerSecond*store.ResultsFreshMs/1000, float64(relay.ResultsPageJobs)-rotated)
	recent := min(jobsPerSecond*store.ResultsRecentMs/1000, store.ResultsRecentMax)
	return max(fresh, recent) + rotated
}

// atJobs is key k's load a second at jobsPerSecond of the site's jobs,
// with the site polling as a stock site does.
func (m siteLoad) atJobs(k string, jobsPerSecond float64) Capacity {
	perSecond := float64(time.Second) / float64(pollEvery)
	var c Capacity
	c.add(m.perJob[k].times(jobsPerSecond))
	c.add(m.pollBase[k])
	c.add(m.pendingRow[k].times(jobsPerSecond * pendingListings))
	c.add(m.resultsRow[k].times(perSecond * resultsRowsPerPoll(jobsPerSecond)))
	return c
}

// atDevices is key k's load a second with devices idle devices consenting
// to the site, which polls as a stock site does with nothing to list.
func (m siteLoad) atDevices(k string, devices float64) Capacity {
	var c Capacity
	c.add(m.perDS[k].times(devices))
	c.add(m.pollBase[k])
	return c
}

// keys is every key the model holds.
func (m siteLoad) keys() []string {
	seen := map[string]bool{}
	var out []string
	for _, part := range []map[string]Capacity{m.perJob, m.perDS, m.pollBase, m.pendingRow, m.resultsRow} {
		for k := range part {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// hottestAt is the key of those grows keeps with the largest share of a
// partition's limit under at (a load a second), and that share.
func hottestAt(keys []string, grows func(string) bool, at func(string) Capacity) *KeyShare {
	var best *KeyShare
	for _, k := range keys {
		if !grows(k) {
			continue
		}
		c := at(k)
		for _, s := range []KeyShare{{Key: k, Reads: true, Share: c.ReadUnits / partitionRCU}, {Key: k, Share: c.WriteUnits / partitionWCU}} {
			if s.Share > 0 && (best == nil || s.Share > best.Share || s.Share == best.Share && s.Key < best.Key) {
				best = &s
			}
		}
	}
	return best
}

// firstAt is the smallest load (devices, jobs/s) at which a key that grows
// reaches a partition's limit, found by bisection (every part of the
// model grows with the load), or nil when none does below maxLoad.
func firstAt(keys []string, grows func(string) bool, at func(string, float64) Capacity) *Saturation {
	const maxLoad = 1e9
	var best *Saturation
	for _, k := range keys {
		if !grows(k) {
			continue
		}
		for _, reads := range []bool{true, false} {
			share := func(x float64) float64 {
				c := at(k, x)
				if reads {
					return c.ReadUnits / partitionRCU
				}
				return c.WriteUnits / partitionWCU
			}
			if share(maxLoad) < 1 {
				continue
			}
			lo, hi := 0.0, maxLoad
			if share(0) >= 1 {
				hi = 0
			}
			for range 128 {
				if mid := (lo + hi) / 2; share(mid) >= 1 {
					hi = mid
				} else {
					lo = mid
				}
			}
			if best == nil || hi < best.At || hi == best.At && k < best.Key {
				best = &Saturation{Key: k, Reads: reads, At: hi}
			}
		}
	}
	return best
}

// KeyShare is a key's share of a partition's limit under one load.
type KeyShare struct {
	Key   string  `json:"key"`
	Reads bool    `json:"reads"`
	Share float64 `json:"share"`
}

// positive drops what is not above zero from each capacity (a row's
// share of a poll that cost less than its empty poll).
func positive(keys map[string]Capacity) map[string]Capacity {
	out := make(map[string]Capacity, len(keys))
	for k, c := range keys {
		c = Capacity{Calls: max(c.Calls, 0), ReadUnits: max(c.ReadUnits, 0), WriteUnits: max(c.WriteUnits, 0), IndexWrite: max(c.IndexWrite, 0)}
		if c.Calls > 0 || c.ReadUnits > 0 || c.WriteUnits > 0 {
			out[k] = c
		}
	}
	return out
}

// times is c's units scaled by f (its call count kept).
func (c Capacity) times(f float64) Capacity {
	return Capacity{Calls: c.Calls, ReadUnits: c.ReadUnits * f, WriteUnits: c.WriteUnits * f, IndexWrite: c.IndexWrite * f}
}
