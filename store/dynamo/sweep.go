package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// Sweep fires what is due. It reads only the due index, whose sort key is
// each job's next deadline, so its cost follows what is due and not what is
// stored. Each transition is conditioned on the version it was decided on,
// so any number of replicas may sweep at once: one wins each job, the rest
// re-read and find nothing due.
func (s *Store) Sweep(ctx context.Context) (store.SweepResult, error) {
	return s.sweep(ctx)
}

// SweepInline is Sweep bounded for a request path: it reads one request
// shard of the due index, the next in this Store's round robin, and
// handles at most inlineLimit of its due items, earliest due first, so a
// backlog left by an outage is drained by the scheduled sweeper and many
// requests, not carried inside one, and a request pays one Query however
// many shards there are. An unsealed set due for repair is an item like a
// job: the bound is on the work a request does, so it may move fewer jobs
// than the bound.
func (s *Store) SweepInline(ctx context.Context) (store.SweepResult, error) {
	res, _, err := s.sweepInline(ctx)
	return res, err
}

// sweepingKey marks the context of every call a sweep makes.
type sweepingKey struct{}

// Sweeping reports whether ctx is a sweep's: SDK middleware that meters
// capacity (the benchmark's) uses it to bill a request's in-line sweep
// (end of life, requeues) apart from the request itself.
func Sweeping(ctx context.Context) bool {
	v, _ := ctx.Value(sweepingKey{}).(bool)
	return v
}

// dueEntry is one item the due index says is due.
type dueEntry struct {
	pk, sk string
	du     int64
}

// sweepPage is how many due entries a scheduled sweep's worker reads in
// one Query before it handles them and reads the next: its memory is one
// page, whatever the backlog. Without the bound a backlog loaded whole runs
// the function out of memory exactly when the sweeper is most needed.
const sweepPage = 100

// swept is one job a sweep moved, with its enqueue order.
type swept struct {
	seq string
	job store.Job
}

// sweep is the complete sweep, every shard (sweepAll), collected into one
// answer.
func (s *Store) sweep(ctx context.Context) (store.SweepResult, error) {
	var mu sync.Mutex
	var requeued, removed []swept
	_, err := s.sweepAll(ctx, func(rq, rm []swept) {
		mu.Lock()
		defer mu.Unlock()
		requeued = append(requeued, rq...)
		removed = append(removed, rm...)
	})
	if err != nil {
		return store.SweepResult{}, err
	}
	return sortedResult(requeued, removed), nil
}

// sweepInline is the in-line sweep: one request shard, at most
// inlineLimit items; handled is how many due entries it read and handled,
// which the request's own targeted sweeps (Claim's, SweepLapsed) take from
// the same budget.
//
// With a ddb.ServerClock it first makes sure the clock is within
// ddb.MaxClockUncertainty of DynamoDB's; if not, it decides no expiry: an
// in-line sweep moves nothing, so the request it runs in still answers
// (the scheduled sweep fails with ErrClockUncertain, counted and alarmed).
//
// One shard, not all: every request would otherwise pay one Query per
// shard, the count that lets the index take the write rate of a large
// fleet. Every shard is still read by some request: each call reads the
// next shard, from a random start per Store, so the replicas' requests
// cover them all and no two replicas march in step. What a request's
// answer depends on does not wait for its shard's turn: Claim, RenewLeases
// and Awaiting judge every deadline, window and lease by the clock, a
// lapsed awaiting grant stays in its queue partition for the next claim
// to find (jobItem.index), and SweepLapsed ends the lapsed grants a
// heartbeat or a pending read names.
func (s *Store) sweepInline(ctx context.Context) (store.SweepResult, int, error) {
	empty := store.SweepResult{Requeued: []store.Job{}, Removed: []store.Job{}}
	ctx = context.WithValue(ctx, sweepingKey{}, true)
	settled, err := s.clockSettled(ctx)
	if err != nil {
		return store.SweepResult{}, 0, err
	}
	if !settled {
		return empty, s.inlineLimit, nil
	}
	now := s.now()
	shard := int(s.inlineShard.Add(1) % uint64(s.shards))
	page, _, err := s.queryDue(ctx, dueShardKey(shard), now, s.inlineLimit, nil)
	if err != nil {
		return store.SweepResult{}, 0, err
	}
	requeued, removed, _, err := s.handleDue(ctx, page, now, false)
	if err != nil {
		return store.SweepResult{}, 0, err
	}
	return sortedResult(requeued, removed), len(page), nil
}

// sweepNamed sweeps the named jobs (at most budget of them) exactly as a
// sweep reaching their due entries would: the targeted half of an in-line
// sweep, for jobs a request read and found lapsed. A job that is not due
// is left as it is.
func (s *Store) sweepNamed(ctx context.Context, pks []string, budget int) (requeued, removed []swept, err error) {
	ctx = context.WithValue(ctx, sweepingKey{}, true)
	if len(pks) == 0 || budget <= 0 {
		return nil, nil, nil
	}
	settled, err := s.clockSettled(ctx)
	if err != nil || !settled {
		return nil, nil, err
	}
	now := s.now()
	var reports []store.UnsealedChurn
	for _, pk := range pks[:min(len(pks), budget)] {
		r, err := s.sweepJob(ctx, pk, now)
		if err != nil {
			return nil, nil, err
		}
		switch r.did {
		case didRequeue:
			requeued = append(requeued, swept{r.seq, r.job})
		case didRemove:
			removed = append(removed, swept{r.seq, r.job})
		}
		if r.churn != nil {
			reports = append(reports, *r.churn)
		}
	}
	for _, c := range reports {
		s.report(c)
	}
	return requeued, removed, nil
}

// SweepLapsed is the targeted half of a request's in-line sweep
// (store.LapseSweeper): it ends the lapsed grants among the named ones
// (a heartbeat's lost leases) and the site's unsealed grants whose
// awaiting window is over (a pending read's), at most InlineSweepLimit
// jobs, each as a sweep reaching its due entry would. The in-line sweep
// reads one due shard a request; without this a heartbeat that reports a
// lease lost, or a pending read that no longer lists a grant, would leave
// the job held until its shard's turn, where the reference has it back in
// the queue at once.
func (s *Store) SweepLapsed(ctx context.Context, in store.LapsedInput) (store.SweepResult, error) {
	var pks []string
	seen := map[string]bool{}
	add := func(pk string) {
		if !seen[pk] {
			seen[pk] = true
			pks = append(pks, pk)
		}
	}
	now := s.now()
	for _, g := range in.Grants {
		site, err := s.leaseSite(ctx, g.LeaseID)
		if err != nil {
			return store.SweepResult{}, err
		}
		if site != "" {
			add(jobPK(site, g.JobID))
		}
	}
	if in.SiteID != "" {
		// An eventually consistent read, at half the price of the pending
		// read's strong one: a lapsed member was written by its claim a
		// whole awaiting window ago, so a replica lacking it is rare, and a
		// member it misses is still ended at its due entry (the set's check,
		// the job's awaiting window); a member just deleted but still read
		// sends the sweep to a job it finds moved on, which it leaves; one
		// just added has a window not yet over, which it skips.
		sets, err := s.unsealedSets(ctx, in.SiteID, false)
		if err != nil {
			return store.SweepResult{}, err
		}
		for _, pk := range lapsedMembers(in.SiteID, sets, now) {
			add(pk)
		}
	}
	requeued, removed, err := s.sweepNamed(ctx, pks, s.inlineLimit)
	if err != nil {
		return store.SweepResult{}, err
	}
	return sortedResult(requeued, removed), nil
}

// lapsedMembers is the jobs (their pks, each once) of the members of a
// site's unsealed sets whose awaiting window is over at now.
func lapsedMembers(siteID string, members []string, now int64) []string {
	var pks []string
	for _, m := range members {
		if _, jobID, window := parseSlotMember(m); jobID != "" && window <= now {
			if pk := jobPK(siteID, jobID); !slices.Contains(pks, pk) {
				pks = append(pks, pk)
			}
		}
	}
	return pks
}

// SweepAwaiting is a pending read's sweep and list from one strongly
// consistent read of the site's sets (store.AwaitingSweeper): the members
// whose window is over are swept as SweepLapsed sweeps them, and the rest
// listed as Awaiting lists them. A member swept is one Awaiting would
// leave out (its window is over), so the list is what the two calls give.
func (s *Store) SweepAwaiting(ctx context.Context, siteID string) ([]store.Job, store.SweepResult, error) {
	members, err := s.unsealedSets(ctx, siteID, true)
	if err != nil {
		return nil, store.SweepResult{}, err
	}
	requeued, removed, err := s.sweepNamed(ctx, lapsedMembers(siteID, members, s.now()), s.inlineLimit)
	if err != nil {
		return nil, store.SweepResult{}, err
	}
	jobs, err := s.awaitingOf(ctx, siteID, members)
	if err != nil {
		return nil, store.SweepResult{}, err
	}
	return jobs, sortedResult(requeued, removed), nil
}

// SweepPages is the scheduled sweep in bounded memory (store.PagedSweeper).
func (s *Store) SweepPages(ctx context.Context, page func(store.SweepResult)) (store.SweepStats, error) {
	return s.sweepAll(ctx, func(requeued, removed []swept) {
		if page != nil {
			page(sortedResult(requeued, removed))
		}
	})
}

// sweepAll is the scheduled sweep: one worker per shard of the due index
// (the request shards and the end hooks' shards, endDueKey), at most
// maxInFlight at once, each reading its shard a page at a time and handling
// the page before it reads the next. An item whose handling fails is
// counted and skipped, so one bad job cannot hold up the rest of the
// backlog; the sweep then still answers an error naming the failures, so
// the invocation fails and is alarmed on.
func (s *Store) sweepAll(ctx context.Context, page func(requeued, removed []swept)) (store.SweepStats, error) {
	ctx = context.WithValue(ctx, sweepingKey{}, true)
	settled, err := s.clockSettled(ctx)
	if err != nil {
		return store.SweepStats{}, err
	}
	if !settled {
		return store.SweepStats{}, ErrClockUncertain
	}
	now := s.now()
	shardKeys := make([]string, 0, 2*s.shards)
	for shard := range s.shards {
		shardKeys = append(shardKeys, dueShardKey(shard))
	}
	for shard := range s.shards {
		shardKeys = append(shardKeys, endDueShardKey(shard))
	}
	var (
		mu     sync.Mutex
		stats  store.SweepStats
		failed []error
		oldest = now
	)
	err = each(len(shardKeys), func(i int) error {
		var start map[string]types.AttributeValue
		first := true
		for {
			entries, next, err := s.queryDue(ctx, shardKeys[i], now, sweepPage, start)
			if err != nil {
				return err
			}
			if first && len(entries) > 0 {
				mu.Lock()
				oldest = min(oldest, entries[0].du)
				mu.Unlock()
			}
			first = false
			requeued, removed, errs, err := s.handleDue(ctx, entries, now, true)
			if err != nil {
				return err
			}
			mu.Lock()
			stats.Requeued += len(requeued)
			stats.Removed += len(removed)
			stats.Failed += len(errs)
			if len(failed) < 10 {
				failed = append(failed, errs[:min(len(errs), 10-len(failed))]...)
			}
			mu.Unlock()
			if len(requeued)+len(removed) > 0 {
				page(requeued, removed)
			}
			if len(next) == 0 {
				return nil
			}
			start = next
		}
	})
	stats.BacklogMs = now - oldest
	if err != nil {
		return stats, err
	}
	if stats.Failed > 0 {
		return stats, fmt.Errorf("sweep: %d due items failed, first: %w", stats.Failed, errors.Join(failed...))
	}
	return stats, nil
}

// queryDue reads one page (at most limit entries) of a due shard's entries
// due by now, earliest first, from start; next is where the next page
// begins (nil: the shard has no more due).
func (s *Store) queryDue(ctx context.Context, dk string, now int64, limit int, start map[string]types.AttributeValue) ([]dueEntry, map[string]types.AttributeValue, error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              &s.table,
		IndexName:              aws.String("due"),
		KeyConditionExpression: aws.String("dk = :dk AND du <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":dk": str(dk), ":now": num(now),
		},
		Limit:             aws.Int32(int32(limit)),
		ExclusiveStartKey: start,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("query due: %w", err)
	}
	entries := make([]dueEntry, 0, len(out.Items))
	for _, av := range out.Items {
		entries = append(entries, dueEntry{pk: getS(av, "pk"), sk: getS(av, "sk"), du: getN(av, "du")})
	}
	return entries, out.LastEvaluatedKey, nil
}

// handleDue decides the due entries of one page, in turn. With skip set an
// item whose handling fails is left (still due) and its error returned in
// errs, and the rest are handled; without it the first failure ends the
// page and is the error.
func (s *Store) handleDue(ctx context.Context, entries []dueEntry, now int64, skip bool) (requeued, removed []swept, errs []error, err error) {
	var reports []store.UnsealedChurn
	ended := map[string]bool{}
	for _, e := range entries {
		var err error
		switch {
		case strings.HasPrefix(e.pk, "J#") && e.sk != skJob:
			// A job's end hook: one pass ends the job's whole partition,
			// however many of its items are due.
			if ended[e.pk] {
				continue
			}
			ended[e.pk] = true
			var r sweepResult
			r, err = s.endJob(ctx, e.pk, now)
			if err == nil && r.did == didRemove {
				removed = append(removed, swept{r.seq, r.job})
			}
		case strings.HasPrefix(e.pk, "J#"):
			var r sweepResult
			r, err = s.sweepJob(ctx, e.pk, now)
			if err == nil {
				switch r.did {
				case didRequeue:
					requeued = append(requeued, swept{r.seq, r.job})
				case didRemove:
					removed = append(removed, swept{r.seq, r.job})
				}
				if r.churn != nil {
					reports = append(reports, *r.churn)
				}
			}
		case strings.HasPrefix(e.pk, "U#"):
			err = s.repairSlots(ctx, e.pk, e.sk, now)
		}
		if err != nil {
			if !skip || ctx.Err() != nil {
				return nil, nil, nil, err
			}
			errs = append(errs, fmt.Errorf("%q: %w", e.pk, err))
		}
	}
	for _, c := range reports {
		s.report(c)
	}
	return requeued, removed, errs, nil
}

// sortedResult orders both halves by enqueue order, the reference's.
func sortedResult(requeued, removed []swept) store.SweepResult {
	bySeq := func(a, b swept) int { return strings.Compare(a.seq, b.seq) }
	slices.SortFunc(requeued, bySeq)
	slices.SortFunc(removed, bySeq)
	res := store.SweepResult{Requeued: []store.Job{}, Removed: []store.Job{}}
	for _, r := range requeued {
		res.Requeued = append(res.Requeued, r.job)
	}
	for _, r := range removed {
		res.Removed = append(res.Removed, r.job)
	}
	return res
}
