package sitestoretest

import (
	"fmt"
	"sync"

	"github.com/byorelay/byorelay/internal/sitestore"
)

var concurrencyCases = []testCase{
	{"concurrent claims grant each job exactly once", func(e *env) {
		const jobs, runners = 6, 4
		for i := range jobs {
			e.create(job(fmt.Sprintf("j%d", i), "alice"))
		}
		var mu sync.Mutex
		granted := map[string]int{}
		var wg sync.WaitGroup
		for r := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := e.s.Claim(e.ctx, sitestore.ClaimInput{RunnerID: fmt.Sprintf("r%d", r), RunnerOwner: "alice", Capabilities: generate, Max: jobs, LeaseMs: 10_000})
				if err != nil {
					e.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, j := range got {
					granted[j.ID]++
				}
			}()
		}
		wg.Wait()
		if len(granted) != jobs {
			e.Fatalf("granted %d distinct jobs, want %d", len(granted), jobs)
		}
		for id, n := range granted {
			if n != 1 {
				e.Fatalf("job %s granted %d times", id, n)
			}
		}
	}},
	// A and B complete at once, and C depends on both: C must end claimable
	// (never blocked forever) and be granted exactly once.
	{"two dependencies completing at once unblock their dependent exactly once", func(e *env) {
		e.create(job("a", "alice"))
		e.create(job("b", "alice"))
		e.create(job("c", "alice", "a", "b"))
		ja := e.claimOne("r1", "alice")
		jb := e.claimOne("r2", "alice")
		var wg sync.WaitGroup
		for _, h := range []struct {
			j      sitestore.Job
			runner string
		}{{ja, "r1"}, {jb, "r2"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: h.j.ID, RunnerID: h.runner,
					Holder: sitestore.HolderByLease(h.j.Lease.ID, h.runner), Outcome: okOutcome()}); err != nil {
					e.Error(err)
				}
			}()
		}
		wg.Wait()
		c := e.get("c")
		if c.ClaimableAt == 0 || c.State != sitestore.StateQueued {
			e.Fatalf("after both dependencies completed, c is %s with claimableAt %d: blocked forever", c.State, c.ClaimableAt)
		}
		// Two claimers race for it: it is granted once.
		var mu sync.Mutex
		grants := 0
		for _, r := range []string{"r3", "r4"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := e.s.Claim(e.ctx, sitestore.ClaimInput{RunnerID: r, RunnerOwner: "alice", Capabilities: generate, Max: 5, LeaseMs: 10_000})
				if err != nil {
					e.Error(err)
				}
				mu.Lock()
				grants += len(got)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if grants != 1 {
			e.Fatalf("c granted %d times, want 1", grants)
		}
		if got := e.get("c"); got.Attempts != 1 {
			e.Fatalf("c attempts %d, want 1", got.Attempts)
		}
	}},
}
