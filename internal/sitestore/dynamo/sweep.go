package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// SweepStats is what one full sweep did.
type SweepStats struct {
	// Fired is how many jobs the sweep changed (expired, requeued).
	Fired int
	// Unblocked is how many unblock markers it finished.
	Unblocked int
	// Failed is how many items it could not finish; they stay in the
	// index for the next sweep.
	Failed int
	// OldestDueAgeMs is how long the oldest entry due when the sweep began
	// had been due (now minus its due time), 0 if none was: the backlog.
	OldestDueAgeMs int64
	// Shards is how many due partitions the sweep read.
	Shards int
}

// ExpireDue fires everything due and finishes every interrupted unblock.
func (s *Store) ExpireDue(ctx context.Context) ([]sitestore.Job, error) {
	return s.collect(ctx, 0)
}

// ExpireDueBefore fires everything due, and the sealed jobs whose
// deadline is at or before sealedBefore: those are indexed at their
// deadline plus the grace (sitestore.DueAt), so the read reaches
// sealedBefore plus the grace and ExpireJobBefore judges each.
func (s *Store) ExpireDueBefore(ctx context.Context, sealedBefore int64) ([]sitestore.Job, error) {
	return s.collect(ctx, sealedBefore)
}

// collect is a full sweep that also returns the jobs it changed: the
// callers that answer with them sweep a table whose due work fits in
// memory (tests, the admin listener, the relay seam). The scheduled
// sweeper calls Sweep, which keeps nothing.
func (s *Store) collect(ctx context.Context, sealedBefore int64) ([]sitestore.Job, error) {
	var mu sync.Mutex
	var changed []sitestore.Job
	_, err := s.sweepAll(ctx, s.now(), sealedBefore, func(j sitestore.Job) {
		mu.Lock()
		changed = append(changed, j)
		mu.Unlock()
	})
	return changed, err
}

// Sweep is the scheduled sweeper's full sweep: every due partition, one
// bounded worker per shard, page by page, keeping nothing but counts. A
// failed item is counted and left for the next sweep; the error joins the
// first failures so the invocation is retried.
func (s *Store) Sweep(ctx context.Context) (SweepStats, error) {
	return s.sweepAll(ctx, s.now(), 0, nil)
}

// sweepShards lists the shards a full sweep reads: the current count's,
// the previous count's (PreviousDueShards), and the unsharded partition
// (-1) a table had before the index was sharded.
func (s *Store) sweepShards() []int {
	shards := []int{-1}
	for i := range max(s.dueShards, s.prevDueShards) {
		shards = append(shards, i)
	}
	return shards
}

// partition is the due index partition of prefix for shard (-1: the
// unsharded one).
func partition(prefix string, shard int) string {
	if shard < 0 {
		return prefix
	}
	return shardPK(prefix, shard)
}

// maxReportedFailures bounds the errors a sweep keeps to report.
const maxReportedFailures = 8

// sweepAll works every shard with at most sweepWorkers goroutines. Each
// worker holds one page of ids at a time, so memory is bounded by
// workers x sweepPage whatever the backlog.
func (s *Store) sweepAll(ctx context.Context, now, sealedBefore int64, each func(sitestore.Job)) (SweepStats, error) {
	shards := s.sweepShards()
	work := make(chan int)
	var mu sync.Mutex
	stats := SweepStats{Shards: len(shards)}
	var errs []error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		stats.Failed++
		if len(errs) < maxReportedFailures {
			errs = append(errs, err)
		}
	}
	var wg sync.WaitGroup
	for range min(s.sweepWorkers, len(shards)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for shard := range work {
				st := s.sweepShard(ctx, shard, now, sealedBefore, 0, each, fail)
				mu.Lock()
				stats.Fired += st.Fired
				stats.Unblocked += st.Unblocked
				stats.OldestDueAgeMs = max(stats.OldestDueAgeMs, st.OldestDueAgeMs)
				mu.Unlock()
			}
		}()
	}
	for _, shard := range shards {
		work <- shard
	}
	close(work)
	wg.Wait()
	return stats, errors.Join(errs...)
}

// sweepInline is the bounded sweep a claim or heartbeat pays before it
// answers: one shard, the next in this instance's round robin, at most
// inlineLimit items. Claim and RenewLeases judge every job they touch by
// the clock themselves, so what this shard does not reach is never
// answered wrongly; it only waits for a later sweep.
func (s *Store) sweepInline(ctx context.Context, now int64) (SweepStats, error) {
	shard := int(s.inlineNext.Add(1) % uint32(s.dueShards))
	var first error
	st := s.sweepShard(ctx, shard, now, 0, s.inlineLimit, nil, func(err error) {
		if first == nil {
			first = err
		}
	})
	return st, first
}

// sweepShard fires one shard's due jobs, earliest first, then finishes its
// unblock markers; at most limit items in all (0: all), page by page. A
// failed item is reported to fail and skipped.
func (s *Store) sweepShard(ctx context.Context, shard int, now, sealedBefore int64, limit int, each func(sitestore.Job), fail func(error)) SweepStats {
	var st SweepStats
	upto := max(now, min(sealedBefore, now)+protocol.ResultGraceMs)
	done := 0
	first := true
	err := s.duePages(ctx, partition(dueKey, shard), upto, limit, func(id string, dueAt int64) {
		if first {
			first = false
			// The index is in due order: the first entry is the oldest.
			if dueAt <= now {
				st.OldestDueAgeMs = now - dueAt
			}
		}
		done++
		var fired bool
		j, _, err := s.apply(ctx, id, nil, func(j sitestore.Job, now int64) (sitestore.Job, bool) {
			next, ok := sitestore.ExpireJobBefore(j, now, sealedBefore)
			fired = ok
			return next, ok
		}, false)
		if err != nil {
			fail(err)
			return
		}
		if fired {
			st.Fired++
			if each != nil {
				each(j)
			}
		}
	})
	if err != nil {
		fail(err)
	}
	budget := 0
	if limit != 0 {
		budget = limit - done
		if budget <= 0 {
			return st
		}
	}
	// Markers older than a moment belong to a completer that died (or is
	// slow: telling dependents twice is harmless).
	err = s.duePages(ctx, partition(unblockPK, shard), now, budget, func(id string, _ int64) {
		if err := s.tellDependents(ctx, id); err != nil {
			fail(err)
			return
		}
		st.Unblocked++
	})
	if err != nil {
		fail(err)
	}
	return st
}

// duePages reads one due partition with dsk <= upto, a page of sweepPage
// at a time, calling each per entry in due order; at most limit entries
// (0: all). It stops at the first failed page.
func (s *Store) duePages(ctx context.Context, pk string, upto int64, limit int, each func(id string, dueAt int64)) error {
	in := &dynamodb.QueryInput{
		TableName:              &s.table,
		IndexName:              aws.String("due"),
		KeyConditionExpression: aws.String("dpk = :p AND dsk <= :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberS{Value: pk},
			":n": &types.AttributeValueMemberN{Value: strconv.FormatInt(upto, 10)},
		},
	}
	seen := 0
	for {
		page := sweepPage
		if limit > 0 {
			page = min(page, limit-seen)
		}
		in.Limit = aws.Int32(int32(page))
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("due %s: %w", pk, err)
		}
		for _, av := range out.Items {
			p, _ := av["pk"].(*types.AttributeValueMemberS)
			d, _ := av["dsk"].(*types.AttributeValueMemberN)
			if p == nil || d == nil {
				continue
			}
			dueAt, _ := strconv.ParseInt(d.Value, 10, 64)
			seen++
			each(strings.TrimPrefix(p.Value, "JOB#"), dueAt)
		}
		if out.LastEvaluatedKey == nil || (limit > 0 && seen >= limit) || ctx.Err() != nil {
			return ctx.Err()
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
