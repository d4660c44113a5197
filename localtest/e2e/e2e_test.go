package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/protocol"
)

// jobsPerSite makes 200 jobs across two sites, plus the one a device dies
// holding.
const jobsPerSite = 100

// leaseMs is the stack's lease: short, so the job of the device that dies
// comes back within the test's budget without moving any clock by hand.
const leaseMs = 5000

// expected is what a job must come back as.
type expected struct {
	site  string
	owner string
	text  string
}

func TestManyJobsAcrossSitesAndDevicesFinishOnceEach(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: DynamoDB Local and 201 jobs")
	}
	started := time.Now()
	st := startStack(t, leaseMs)
	t.Logf("stack up: %v", time.Since(started).Round(time.Millisecond))
	shopA, shopB := st.newSite("shop-a"), st.newSite("shop-b")
	st.consent("alice", "shop-a", "shop-b")
	st.consent("bob", "shop-a", "shop-b")

	// Four devices, two per owner, each paired by a person approving its
	// code. alice-1 is the one that will die mid-job.
	var devices [4]*device
	var wg sync.WaitGroup
	for i, spec := range []struct {
		owner, runner string
		backend       daemon.Backend
	}{
		{"alice", "alice-1", hangingBackend{}},
		{"alice", "alice-2", daemon.EchoBackend{}},
		{"bob", "bob-1", daemon.EchoBackend{}},
		{"bob", "bob-2", daemon.EchoBackend{}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			devices[i] = st.pair(spec.owner, spec.runner, spec.backend)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("stack up and 4 devices paired: %v", time.Since(started).Round(time.Millisecond))
	alice1 := devices[0]
	byRunner := map[string]*device{}
	for _, d := range devices {
		byRunner[d.runnerID] = d
		if got := d.ServedSites(); len(got) != 2 {
			t.Fatalf("%s serves %v after pairing, want both sites pinned", d.runnerID, got)
		}
	}

	ctx, stop := context.WithCancel(st.ctx)
	defer stop()
	results := newCollector()
	pumps := startPumps(ctx, t, results, shopA, shopB)

	var wantMu sync.Mutex
	want := map[string]expected{}
	publish := func(s *site.Client, siteID, id, owner string, p protocol.JobPayload) {
		kind := protocol.KindGenerate
		if p.Messages != nil {
			kind = protocol.KindChat
		}
		stub := protocol.JobStub{ID: id, Kind: kind, Owner: owner, Audience: "private",
			DeadlineAt: time.Now().Add(2 * time.Minute).UnixMilli()}
		wantMu.Lock()
		want[siteID+"/"+id] = expected{site: siteID, owner: owner, text: "echo: " + daemon.ComposePrompt(kind, p)}
		wantMu.Unlock()
		if _, err := s.Publish(ctx, stub, p); err != nil {
			t.Errorf("publish %s: %v", id, err)
		}
	}

	// The doomed job first, with only alice-1 running, so it is alice-1's.
	alice1Run, alice1Stop := context.WithCancel(ctx)
	alice1Done := make(chan error, 1)
	// Before alice-1 can claim: its lease starts later than this.
	beforeClaim := time.Now()
	go func() { alice1Done <- alice1.Run(alice1Run) }()
	publish(shopA, "shop-a", "doomed", "alice", protocol.GeneratePayload("hang until the device dies"))
	waitUntil(t, 20*time.Second, "alice-1 to start the doomed job", func() bool {
		return alice1.events.has(daemon.EventRunning, "doomed")
	}, func() string { return fmt.Sprintf("alice-1 events: %+v", alice1.events.all()) })
	// alice-1 dies: its network goes, and it never speaks again. Nothing is
	// released; the relay has only the lease's expiry to go on.
	alice1.net.cut.Store(true)
	alice1Stop()
	<-alice1Done
	t.Logf("alice-1 died holding the doomed job: %v", time.Since(started).Round(time.Millisecond))

	running := map[string]chan error{}
	for _, d := range devices[1:] {
		done := make(chan error, 1)
		running[d.runnerID] = done
		go func() { done <- d.Run(ctx) }()
	}
	// Published from eight goroutines, as a busy site's request handlers
	// would, while the devices are already working.
	owners := []string{"alice", "bob"}
	jobs := make(chan func(), 2*jobsPerSite)
	for i := range jobsPerSite {
		for _, s := range []struct {
			c  *site.Client
			id string
		}{{shopA, "shop-a"}, {shopB, "shop-b"}} {
			owner := owners[i%2]
			id := fmt.Sprintf("job-%03d", i)
			prompt := fmt.Sprintf("%s asks %s question %d", owner, s.id, i)
			var p protocol.JobPayload
			if i%3 == 0 {
				p = protocol.ChatPayload(protocol.ChatMessage{Role: "user", Content: prompt}, protocol.ChatMessage{Role: "assistant", Content: "and?"})
			} else {
				p = protocol.GeneratePayload(prompt)
			}
			jobs <- func() { publish(s.c, s.id, id, owner, p) }
		}
	}
	close(jobs)
	var publishers sync.WaitGroup
	for range 8 {
		publishers.Add(1)
		go func() {
			defer publishers.Done()
			for job := range jobs {
				job()
			}
		}()
	}
	publishers.Wait()
	t.Logf("%d jobs published: %v", len(want), time.Since(started).Round(time.Millisecond))
	// Every job's deadline is 2 minutes from its publish, so by 3 minutes
	// each has a result or never will: a loaded machine's DynamoDB Local
	// has all of its jobs' time, and a lost job still fails here.
	waitUntil(t, 3*time.Minute, fmt.Sprintf("all %d results", len(want)), func() bool {
		return results.count() >= len(want)
	}, func() string { return fmt.Sprintf("%d of %d results", results.count(), len(want)) })
	stop()
	for _, p := range pumps {
		<-p
	}
	for id, done := range running {
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("%s stopped with %v", id, err)
		}
	}
	shutdown, cancel := context.WithTimeout(st.ctx, 10*time.Second)
	defer cancel()
	for _, d := range devices {
		_ = d.Shutdown(shutdown)
	}

	// Every job came back once, opened and verified by its site, with the
	// answer to exactly what was asked, from a device of the job's owner.
	got := results.all()
	for key, res := range got {
		w, ok := want[key]
		if !ok {
			t.Errorf("a result for %s, which nobody published", key)
			continue
		}
		if len(res) != 1 {
			t.Errorf("%s was delivered %d times", key, len(res))
			continue
		}
		r := res[0]
		if r.Outcome.Outcome != protocol.DispositionOK || r.Outcome.TextOrEmpty() != w.text {
			t.Errorf("%s came back as %+v, want text %q", key, r.Outcome, w.text)
		}
		d := byRunner[r.RunnerID]
		if d == nil || r.DeviceKeyID != d.keys.KeyID() || r.RunnerOwner != w.owner {
			t.Errorf("%s was answered by %s (%s, owner %s), not a device of %s", key, r.RunnerID, r.DeviceKeyID, r.RunnerOwner, w.owner)
		}
	}
	for key := range want {
		if _, ok := got[key]; !ok {
			t.Errorf("%s never came back", key)
		}
	}

	// The relay accepted exactly one result per job: every accepted report,
	// across every device, counted.
	accepted := map[string]int{}
	for _, d := range devices {
		for _, e := range d.events.all() {
			if e.Type == daemon.EventReported && !strings.Contains(e.Detail, "already recorded") {
				accepted[e.Site+"/"+e.JobID]++
			}
		}
	}
	for key, n := range accepted {
		if n != 1 {
			t.Errorf("the relay accepted %d results for %s", n, key)
		}
	}

	// The doomed job: alice-1 never reported it, and another of alice's
	// devices finished it once the lease lapsed.
	if alice1.events.has(daemon.EventReported, "doomed") {
		t.Error("the dead device reported the doomed job")
	}
	if r := got["shop-a/doomed"]; len(r) == 1 {
		if r[0].RunnerID != "alice-2" {
			t.Errorf("the doomed job was finished by %s, want alice-2 (the other device of its owner)", r[0].RunnerID)
		}
		// The lease ran from alice-1's claim, which came after
		// beforeClaim, so no correct relay hands the job on sooner than a
		// lease after it, less what the store clock's error may differ
		// by between the claim and the sweep (each within its uncertainty
		// of DynamoDB's clock, one either side). Timed from the device's death instead, the bound
		// would hold only if the claim, the payload and the start of the
		// run took less than the margin, which a loaded machine's slow
		// round trips do not promise.
		minimum := leaseMs*time.Millisecond - 2*ddb.MaxClockUncertainty
		if took := results.at("shop-a/doomed").Sub(beforeClaim); took < minimum {
			t.Errorf("the doomed job came back %v after alice-1 started, before its lease (%v from the claim) could lapse", took, minimum)
		}
	}
	t.Logf("%d jobs, %d devices, 2 sites: %v", len(want), len(devices), time.Since(started).Round(time.Millisecond))
}

// collector keeps every delivered result, by site/job, with when it came.
type collector struct {
	mu      sync.Mutex
	results map[string][]site.Result
	when    map[string]time.Time
}

func newCollector() *collector {
	return &collector{results: map[string][]site.Result{}, when: map[string]time.Time{}}
}

func (c *collector) add(siteID string, r site.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := siteID + "/" + r.JobID
	c.results[key] = append(c.results[key], r)
	if _, ok := c.when[key]; !ok {
		c.when[key] = time.Now()
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.results)
}

func (c *collector) all() map[string][]site.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]site.Result{}
	for k, v := range c.results {
		out[k] = append([]site.Result(nil), v...)
	}
	return out
}

func (c *collector) at(key string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.when[key]
}

// startPumps runs each site's pump loop until ctx ends, as a site's cron
// would; a refused result or a relay error fails the test.
func startPumps(ctx context.Context, t *testing.T, c *collector, sites ...*site.Client) []chan struct{} {
	ids := []string{"shop-a", "shop-b"}
	var done []chan struct{}
	for i, s := range sites {
		ch := make(chan struct{})
		done = append(done, ch)
		go func() {
			defer close(ch)
			for ctx.Err() == nil {
				rep, err := s.Pump(ctx)
				if err != nil && ctx.Err() == nil {
					t.Errorf("%s pump: %v", ids[i], err)
					return
				}
				for _, r := range rep.Results {
					c.add(ids[i], r)
				}
				for _, r := range rep.Refused {
					// A payload post that lost the race with the awaiting
					// window is the relay's to requeue; a refused result
					// never is.
					if !strings.HasPrefix(r.Reason, "relay: ") {
						t.Errorf("%s refused %s: %s", ids[i], r.JobID, r.Reason)
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return done
}

// waitUntil polls cond in real time: this waits for a distributed system
// to finish, not for a timer under test.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s: %s", limit, what, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
