package storetest

import (
	"fmt"
	"sync"

	"github.com/byorelay/byorelay/store"
)

// concurrencyCases are the one place the suite runs callers at once. They
// cannot prove CLAIM_ATOMIC (a lucky schedule passes a racy store), but a
// store that reads, decides and writes in separate steps fails them often,
// and under -race the memory store's locking is checked too.
var concurrencyCases = []testCase{
	{"grants each job once, and holds the pair cap, to concurrent claimers", func(e *env) {
		owners := []string{"o1", "o2", "o3", "o4"}
		var routes []store.Route
		for _, owner := range owners {
			routes = append(routes, store.Route{SiteID: site, Owner: owner})
			for n := range 4 {
				s := stub(fmt.Sprintf("%s-%d", owner, n), owner)
				s.Audience = "team"
				e.enqueue(site, s)
			}
		}

		const claimers = 6
		results := make([][]store.Claimed, claimers)
		errs := make([]error, claimers)
		var wg sync.WaitGroup
		for i := range claimers {
			wg.Go(func() {
				in := asRunner(fmt.Sprintf("runner_%d", i))
				in.Owner = "roster_owner"
				in.Routes = routes
				results[i], errs[i] = e.s.Claim(e.ctx, in)
			})
		}
		wg.Wait()

		granted := map[string]string{}
		for i, res := range results {
			e.check(errs[i])
			for _, c := range res {
				if other, dup := granted[c.ID]; dup {
					e.Fatalf("job %s granted to both %s and %s", c.ID, other, c.Lease.RunnerID)
				}
				granted[c.ID] = c.Lease.RunnerID
			}
		}

		// A claimer that lost a race may come back short; one more claim
		// settles the queue, and then every pair holds exactly its cap.
		settle := asRunner("runner_settle")
		settle.Owner = "roster_owner"
		settle.Routes = routes
		e.claim(settle)
		for _, owner := range owners {
			unsealed := 0
			for n := range 4 {
				job := e.mustJob(site, fmt.Sprintf("%s-%d", owner, n))
				if job.State == store.StateAwaitingPayload {
					unsealed++
				}
			}
			e.same("unsealed grants of "+owner, unsealed, store.UnsealedPerPair)
		}
	}},
}
