package relay

import (
	"log/slog"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// The reads name their site in the query and are signed over an empty
// body; the query is checked against the signer exactly as a body is
// (decodeSite).

// pending is what needs sealing and who to seal it to: the claiming
// device's public keys, which is the whole reason a blind relay can exist.
// It sweeps first, so a site is never asked to seal for a claim that has
// already lapsed.
func (r *Relay) pending(c *call, _ *request, siteID string, _ protocol.QueryRequest) (reply, error) {
	swept, err := r.store.SweepInline(c.ctx)
	if err != nil {
		return reply{}, err
	}
	r.noteSweep(c.ctx, "pending", swept)
	awaiting, err := r.awaiting(c, siteID)
	if err != nil {
		return reply{}, err
	}
	jobs := make([]protocol.SitePendingJob, 0, len(awaiting))
	for _, job := range awaiting {
		row := protocol.SitePendingJob{JobID: job.ID, AwaitingUntil: job.AwaitingUntil}
		// Always set for an awaiting job; left absent rather than crashing
		// if a future state-machine edit broke that.
		if h := job.ClaimedBy; h != nil {
			device := h.Device
			row.Device = &device
			row.RunnerID = h.RunnerID
			row.LeaseID = h.LeaseID
			// The grant's own clock, distinct from awaitingUntil: a site
			// adopting the lease needs when the grant ends.
			row.LeaseExpiresAt = h.LeaseExpiresAt
		}
		jobs = append(jobs, row)
	}
	r.decide(c, "pending", slog.Int("jobs", len(jobs)))
	return ok(protocol.SitePendingResponse{Jobs: jobs}), nil
}

// awaiting is the site's awaiting list, its grants whose awaiting window
// is over requeued first, wherever their due entries are: from one read of
// the site's grants where the store offers it (store.AwaitingSweeper).
func (r *Relay) awaiting(c *call, siteID string) ([]store.Job, error) {
	if sw, ok := r.store.(store.AwaitingSweeper); ok {
		jobs, swept, err := sw.SweepAwaiting(c.ctx, siteID)
		if err != nil {
			return nil, err
		}
		r.noteSweep(c.ctx, "pending", swept)
		return jobs, nil
	}
	if err := r.sweepLapsed(c, "pending", store.LapsedInput{SiteID: siteID}); err != nil {
		return nil, err
	}
	return r.store.Awaiting(c.ctx, siteID)
}

// results lists sealed results for the site to open and verify. A GET, or
// any request without a body, is the reference's pure read, bounded: a
// result is listed until the job's deadline, but one answer holds at most
// ResultsPageJobs of them and about ResultsPageBytes
// (store.RoutingStore.ResultsPage: those accepted in the last
// store.ResultsFreshMs, and a rotation through the rest). The v2 wire
// allows it: the answer is a list a site deduplicates and completes row by
// row, with no promise that one answer is the whole set, and a site polls
// until each job it waits on is listed. Listing every result before its
// deadline, each poll would re-read each result until then, so a job's
// cost would grow with its deadline, and an answer would pass Lambda's 6
// MB response limit at a few thousand results. It does not sweep.
//
// A POST with a body is byorelay's collect (protocol.CollectRequest): the
// site names the results and eviction notices it has taken, the relay
// forgets them, and answers the same list plus the notices still due
// (protocol.CollectResponse). Without it a site's every poll reads every
// job it finished until the job's deadline, so one poll grows with
// everything the site has done; and an evicted job is gone without a word.
func (r *Relay) results(c *call, _ *request, siteID string, _ protocol.QueryRequest) (reply, error) {
	page, err := r.store.ResultsPage(c.ctx, siteID, ResultsPageJobs)
	if err != nil {
		return reply{}, err
	}
	jobs, err := r.encodeResults(siteID, page)
	if err != nil {
		return reply{}, err
	}
	jobs = withinBytes(jobs, ResultsPageBytes)
	r.decide(c, "results", slog.Int("jobs", len(jobs)))
	return ok(protocol.EncodedResults{Jobs: jobs}), nil
}

// collect is results with a body: forget what the site has taken, then list.
func (r *Relay) collect(c *call, _ *request, siteID string, req protocol.CollectRequest) (reply, error) {
	if err := r.store.Collect(c.ctx, siteID, req.Collected); err != nil {
		return reply{}, err
	}
	// Results past their deadline too, for the grace: one accepted in the
	// deadline's last instant reaches a site whose next poll came after it
	// (protocol.ResultGraceMs).
	jobs, err := r.finished(c, siteID, store.ResultGraceMs)
	if err != nil {
		return reply{}, err
	}
	// Bounded in bytes as the GET is; what is left out is listed again
	// once the site has collected what it was sent.
	jobs = withinBytes(jobs, ResultsPageBytes)
	evicted, err := r.store.Evicted(c.ctx, siteID)
	if err != nil {
		return reply{}, err
	}
	r.decide(c, "collect", slog.Int("collected", len(req.Collected)), slog.Int("jobs", len(jobs)), slog.Int("evicted", len(evicted)))
	return ok(protocol.EncodedCollect{Jobs: jobs, Evicted: evicted}), nil
}

// finished is the site's uncollected results as the wire lists them,
// each row encoded (once per row, not once per poll: resultRows), up to
// graceMs past their deadline.
func (r *Relay) finished(c *call, siteID string, graceMs int64) ([]protocol.Encoded, error) {
	finished, err := r.store.Finished(c.ctx, siteID, graceMs)
	if err != nil {
		return nil, err
	}
	return r.encodeResults(siteID, finished)
}

// encodeResults is the store's results as the wire lists them.
func (r *Relay) encodeResults(siteID string, finished []store.Job) ([]protocol.Encoded, error) {
	jobs := make([]protocol.SiteResult, 0, len(finished))
	for _, job := range finished {
		row := protocol.SiteResult{JobID: job.ID, Envelope: job.Result, Disposition: string(job.Disposition)}
		if h := job.ClaimedBy; h != nil {
			row.RunnerID = h.RunnerID
			// The grant the result was recorded under, so the site can
			// complete against it.
			row.LeaseID = h.LeaseID
			// Which device ran it, so the site verifies the result against
			// the key it sealed to; whose machine it was, as the
			// projection's owner id (never a key id).
			row.Device = &h.Device // the store's copy is this call's
			row.RunnerOwner = h.Owner
		}
		jobs = append(jobs, row)
	}
	return r.rows.encode(siteID, jobs)
}

// ResultsPageJobs bounds how many results one GET results answer lists;
// ResultsPageBytes bounds its encoded rows (at least one row is always
// listed: one envelope is within the protocol's limit, which is itself
// near Lambda's response limit). Both well under Lambda's 6 MB response.
const (
	ResultsPageJobs  = 50
	ResultsPageBytes = 4 << 20
)

// withinBytes is the longest prefix of rows, at least one, whose sizes sum
// to at most limit. Rows left out this time are listed again later: each
// stays in the site's rotation until its deadline.
func withinBytes(rows []protocol.Encoded, limit int) []protocol.Encoded {
	total := 0
	for i, row := range rows {
		total += len(row)
		if total > limit && i > 0 {
			return rows[:i]
		}
	}
	return rows
}
