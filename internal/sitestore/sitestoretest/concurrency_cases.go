package sitestoretest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
)

func concurrencyCases() []testCase {
	return []testCase{
		{"concurrent claims grant each job exactly once", func(t *testing.T, e Env) {
			const jobs, runners = 6, 4
			for i := range jobs {
				e.create(t, job(fmt.Sprintf("j%d", i), "alice"))
			}
			var mu sync.Mutex
			granted := map[string]int{}
			var wg sync.WaitGroup
			for r := range runners {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := e.Store.Claim(ctx, sitestore.ClaimInput{RunnerID: fmt.Sprintf("r%d", r), RunnerOwner: "alice", Capabilities: generate, Max: jobs, LeaseMs: 10_000})
					if err != nil {
						t.Error(err)
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
				t.Fatalf("granted %d distinct jobs, want %d", len(granted), jobs)
			}
			for id, n := range granted {
				if n != 1 {
					t.Fatalf("job %s granted %d times", id, n)
				}
			}
		}},
		{"two dependencies completing at once unblock their dependent exactly once", func(t *testing.T, e Env) {
			RaceDependencyUnblock(t, e)
		}},
	}
}

// RaceDependencyUnblock completes A and B concurrently, where C depends on
// both, and checks that C is then claimable and granted exactly once. The
// DynamoDB store runs it many times over with real replicas.
func RaceDependencyUnblock(t *testing.T, e Env) {
	t.Helper()
	e.create(t, job("a", "alice"))
	e.create(t, job("b", "alice"))
	e.create(t, job("c", "alice", "a", "b"))
	ja := e.claimOne(t, "r1", "alice")
	jb := e.claimOne(t, "r2", "alice")
	var wg sync.WaitGroup
	for _, h := range []struct {
		j      sitestore.Job
		runner string
	}{{ja, "r1"}, {jb, "r2"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: h.j.ID, RunnerID: h.runner,
				Holder: sitestore.HolderByLease(h.j.Lease.ID, h.runner), Outcome: okOutcome()}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c := e.get(t, "c")
	if c.ClaimableAt == 0 || c.State != sitestore.StateQueued {
		t.Fatalf("after both dependencies completed, c is %s with claimableAt %d: blocked forever", c.State, c.ClaimableAt)
	}
	// Two claimers race for it: it is granted once.
	var mu sync.Mutex
	grants := 0
	for _, r := range []string{"r3", "r4"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.Store.Claim(ctx, sitestore.ClaimInput{RunnerID: r, RunnerOwner: "alice", Capabilities: generate, Max: 5, LeaseMs: 10_000})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			grants += len(got)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if grants != 1 {
		t.Fatalf("c granted %d times, want 1", grants)
	}
	if got := e.get(t, "c"); got.Attempts != 1 {
		t.Fatalf("c attempts %d, want 1", got.Attempts)
	}
}
