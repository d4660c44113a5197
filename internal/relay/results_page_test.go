package relay_test

import (
	"fmt"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// A site holding more results than one GET answer lists is answered within
// the bound, and still gets every result over successive polls. The bound
// is relay.ResultsPageJobs, or, while more than its fresh share were
// accepted in the last store.ResultsRecentMs, every one of those and the
// rotation's share: the first poll, with every result just accepted,
// lists them all.
func TestResultsPageBound(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		n := relay.ResultsPageJobs + relay.ResultsPageJobs/2 + 7
		for i := range n {
			// A millisecond apart: the newest are the latest deadlines.
			w.advance(1)
			w.finishJob(fmt.Sprintf("job-%03d", i))
		}
		newest := fmt.Sprintf("job-%03d", n-1)
		seen := map[string]bool{}
		// Job i was accepted i+1 ms in; elapsed is the ms since then.
		elapsed := int64(n)
		recent := func() int {
			count := 0
			for i := range n {
				if elapsed-int64(i+1) < store.ResultsRecentMs {
					count++
				}
			}
			return count
		}
		// The rotation moves its share of a page a poll, polls
		// store.ResultsRotateMs apart: n results in n/share polls, one
		// more from wherever it starts, all within the fresh window.
		share := store.ResultsRotated(relay.ResultsPageJobs)
		for poll := range n/share + 2 {
			resp := w.siteCall(w.site, "results", nil)
			expectStatus(t, resp, 200)
			if len(resp.Body) > relay.ResultsPageBytes+1024 {
				t.Fatalf("an answer of %d bytes", len(resp.Body))
			}
			page := decode[protocol.SiteResultsResponse](t, resp)
			bound := relay.ResultsPageJobs
			if r := recent(); r > bound-share {
				bound = min(r, store.ResultsRecentMax) + share
			}
			if len(page.Jobs) > bound {
				t.Fatalf("poll %d: an answer of %d results, bound %d", poll, len(page.Jobs), bound)
			}
			if poll == 0 && len(page.Jobs) != n {
				t.Fatalf("the first poll, every result just accepted, lists %d of %d", len(page.Jobs), n)
			}
			found := false
			for _, j := range page.Jobs {
				seen[j.JobID] = true
				found = found || j.JobID == newest
			}
			if !found {
				t.Fatalf("the newest result, %s, is not in the answer", newest)
			}
			w.advance(store.ResultsRotateMs)
			elapsed += store.ResultsRotateMs
		}
		if len(seen) != n {
			t.Fatalf("%d of %d results listed over the polls", len(seen), n)
		}
	})
}
