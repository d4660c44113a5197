package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
		sets, err := s.unsealedSets(ctx, in.SiteID)
		if err != nil {
			return store.SweepResult{}, err
		}
		for _, m := range sets {
			_, jobID, window := parseSlotMember(m)
			if jobID != "" && window <= now {
				add(jobPK(in.SiteID, jobID))
			}
		}
	}
	requeued, removed, err := s.sweepNamed(ctx, pks, s.inlineLimit)
	if err != nil {
		return store.SweepResult{}, err
	}
	return sortedResult(requeued, removed), nil
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

type sweepDid int

const (
	didNothing sweepDid = iota
	didRequeue
	didRemove
	// didExpire: a finished job past its end reached through a stale due
	// entry, made a tombstone (its result goes). Not reported: it
	// finished, nothing was lost.
	didExpire
)

type sweepResult struct {
	did   sweepDid
	seq   string
	job   store.Job
	churn *store.UnsealedChurn
}

// sweepJob decides one due job and writes the decision.
func (s *Store) sweepJob(ctx context.Context, pk string, now int64) (sweepResult, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		av, err := s.getRaw(ctx, pk, skJob)
		if err != nil || av == nil {
			return sweepResult{}, err
		}
		j, err := unmarshalJob(av)
		if err != nil || j.Gone {
			return sweepResult{}, err
		}
		d, write, err := s.planSweep(ctx, pk, j, now)
		if err != nil || !write {
			return sweepResult{}, err
		}
		if d.did == didRemove || d.did == didExpire {
			if err := s.loadEnvelopes(ctx, d.left); err != nil && !errors.Is(err, ErrNoBucket) {
				return sweepResult{}, err
			}
		}
		out, _, err := s.commit(ctx, d.w)
		if err != nil {
			return sweepResult{}, err
		}
		if out != committed {
			continue
		}
		if d.did == didNothing {
			return sweepResult{}, nil
		}
		s.dropSwept(ctx, pk, j, d, now)
		job, err := d.left.job()
		if err != nil {
			return sweepResult{}, err
		}
		return sweepResult{did: d.did, seq: j.Seq, job: job, churn: d.churn}, nil
	}
	return sweepResult{}, fmt.Errorf("sweep %q: %w", pk, ErrContention)
}

// sweepDecision is what a sweep decided for one job.
type sweepDecision struct {
	w   jobWrite
	did sweepDid
	// churn is the unsealed-churn report the write carries, if any.
	churn *store.UnsealedChurn
	// left is the job as the decision leaves it: what is reported.
	left *jobItem
	// drop are the objects deleted once the write committed.
	drop []string
}

// planSweep is what a sweep writes for one due job, by the sweep rule
// (store.DecideSweep); false when it writes nothing.
func (s *Store) planSweep(ctx context.Context, pk string, j *jobItem, now int64) (sweepDecision, bool, error) {
	d := sweepDecision{w: jobWrite{pk: pk, ver: j.Ver, unsealed: unsealed(j)}}
	// A finished job is listed to a collect for the grace past its
	// deadline (store.ResultGraceMs); its end hook brings the sweep back
	// to delete it after that (endJob). A sweep reaches one only through
	// a due entry read before the result's write moved it off the due
	// index (a result accepted just before the deadline, written as the
	// sweep ran): it must not take the result the relay just accepted.
	if j.State == string(store.StateDone) && j.Deadline+store.ResultGraceMs > now {
		return sweepDecision{}, false, nil
	}
	switch verdict := store.DecideSweep(j.sweepFacts(), now); verdict {
	case store.SweepExpire, store.SweepRemove:
		// Its item overwritten by a tombstone that keeps no ciphertext
		// (TTL collects it), its payload item and objects deleted after
		// the write.
		d.w.put = j.tombstone()
		d.did = didRemove
		if verdict == store.SweepExpire {
			d.did = didExpire
		}
		d.left, d.drop = j, []string{j.PayloadS3, j.ResultS3}

	case store.SweepReofferUnsealed, store.SweepEvict:
		if err := s.decideUnsealed(ctx, j, now, verdict == store.SweepEvict, &d); err != nil {
			return sweepDecision{}, false, err
		}

	case store.SweepRequeueLapsed:
		next := *j
		next.requeue()
		d.w.put = &next
		d.did, d.left, d.drop = didRequeue, &next, []string{j.PayloadS3}

	default:
		if j.DU > now {
			// The index lagged a change that moved the due time.
			return sweepDecision{}, false, nil
		}
		// Due early: a sealed grant keeps its earlier due time until a
		// sweep reaches it (jobItem.index). Now write the real one.
		next := *j
		next.DU = 0
		d.w.put, d.w.unsealed = &next, nil
	}
	return d, true, nil
}

// sweepFacts is what the sweep's rule (store.DecideSweep) reads of j.
func (j *jobItem) sweepFacts() store.SweepFacts {
	return store.SweepFacts{
		State: store.State(j.State), DeadlineAt: j.Deadline, AwaitingUntil: j.AwaitingUntil,
		Claimed: j.claimed(), LeaseExpiresAt: j.LeaseExp, SealAttempts: j.SealAttempts,
	}
}

// decideUnsealed writes the rule's verdict on a job whose site never
// sealed the grant: requeued for the same device, or, with evict, removed
// with a notice to the site. Either way the pair's churn is noted.
func (s *Store) decideUnsealed(ctx context.Context, j *jobItem, now int64, evict bool, d *sweepDecision) error {
	next := *j
	if s.onChurn != nil {
		item, c, err := s.noteChurn(ctx, j.Site, j.Owner, now)
		if err != nil {
			return err
		}
		d.w.extra = append(d.w.extra, item)
		d.churn = c
	}
	// Set before the requeue clears the holder.
	if next.ReofferTo == "" {
		next.ReofferTo = j.Runner
	}
	if !evict {
		next.SealAttempts = j.SealAttempts + 1
		next.requeue()
		d.w.put = &next
		d.did, d.left = didRequeue, &next
		return nil
	}
	d.w.put = j.tombstone()
	d.did, d.left, d.drop = didRemove, &next, []string{j.PayloadS3, j.ResultS3}
	// In the same transaction as the delete: an eviction the
	// site is never told of is a job lost without a word.
	notice, err := s.evictionNotice(j)
	if err != nil {
		return err
	}
	d.w.extra = append(d.w.extra, notice)
	return nil
}

// dropSwept deletes what a swept job leaves behind, in the same pass as
// the write that dropped it: a removed job's payload item and objects hold
// ciphertext nobody may read any more. What fails here is still named by
// the job's end hooks (its payload item, its end item), which the end
// sweep retries.
func (s *Store) dropSwept(ctx context.Context, pk string, j *jobItem, d sweepDecision, now int64) {
	ctx = context.WithoutCancel(ctx)
	s.dropObjects(ctx, d.drop...)
	s.dropPayloadItem(ctx, j)
	if d.did != didRequeue && j.claimed() {
		// The end item goes too, with what it names: the objects (any
		// a failed delete or a seal that lost its race left to it
		// included) and the frames of every stream the job's grants
		// wrote. A job removed unclaimed holds none of them; what an
		// earlier grant left waits for its hooks' due time.
		s.dropHooks(ctx, pk, j.Deadline, now, false)
	}
}

// endRetryMs is how much later an end hook falls due again after one of
// the deletes it brought the sweep back for failed: soon enough that a
// throttled or failed delete is retried within minutes, late enough that
// hooks which keep failing (S3 unavailable) do not fill every in-line
// sweep's budget, which takes the earliest due entries first.
const endRetryMs = 60_000

// endJob ends what is left of a job once its deadline and the result grace
// are over (endAt): one of its end hooks (its payload item, its end item)
// fell due. From then on no read returns anything of the job, so the sweep
// deletes everything of it that holds ciphertext: a finished job's item
// (its result) and the S3 objects it points at, then its payload items,
// then the objects its end item names (every object the job wrote), and
// the end item last. An
// unfinished job still there is removed first, as its own due entry would
// have removed it (sweepJob), and reported.
//
// Every item is judged by its own deadline: a job published again under
// the same id has a later one, and nothing of it is touched. A delete that
// fails leaves its item where it was and this pass goes on with the rest of
// the sweep; the job's hooks that are left fall due again endRetryMs later,
// so the next sweep retries. If the finished job's own item could not be
// deleted, no hook is deleted either: they are what brings the sweep back
// to it.
func (s *Store) endJob(ctx context.Context, pk string, now int64) (sweepResult, error) {
	var res sweepResult
	failed := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		av, err := s.getRaw(ctx, pk, skJob)
		if err != nil {
			failed = true
			break
		}
		if av == nil {
			break
		}
		j, err := unmarshalJob(av)
		if err != nil {
			failed = true
			break
		}
		// A tombstone holds no ciphertext (TTL takes it); a job whose end
		// is not over is a newer job under the same key.
		if j.Gone || endAt(j.Deadline) > now {
			break
		}
		if j.State != string(store.StateDone) {
			r, err := s.sweepJob(ctx, pk, now)
			if err != nil {
				return sweepResult{}, err
			}
			if r.did == didNothing {
				break
			}
			if r.did == didRemove {
				res = r
			}
			continue
		}
		// Its objects are named by its end item too, which is what retries
		// a delete that fails here.
		s.dropObjects(ctx, j.PayloadS3, j.ResultS3)
		_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.table, Key: key(pk, skJob),
			ConditionExpression:       aws.String("ver = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(j.Ver)},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// Changed since the read (a collect): decide again.
			continue
		}
		failed = err != nil
		break
	}

	s.dropHooks(ctx, pk, now-store.ResultGraceMs, now, failed)
	return res, nil
}

// dropHooks deletes the items of a job's partition other than the job item
// (its payload items, its end item and the objects that names) that belong
// to a job whose deadline is upTo or earlier, and moves those it cannot
// delete (or all of them, when keep is set) endRetryMs later on the due
// index. Every delete is idempotent, so a retry that repeats one is
// harmless.
func (s *Store) dropHooks(ctx context.Context, pk string, upTo, now int64, keep bool) {
	hooks, err := s.endHooks(ctx, pk, upTo)
	if err != nil {
		// Nothing deleted, nothing moved: the next sweep reads them again.
		return
	}
	var left []map[string]types.AttributeValue
	for _, h := range hooks {
		if keep {
			left = append(left, h)
			continue
		}
		sk := getS(h, "sk")
		var cond *string
		values := map[string]types.AttributeValue(nil)
		if sk == skEnd {
			err := s.deleteObjects(ctx, getSS(h, endObjects)...)
			for _, pk := range getSS(h, endStreams) {
				err = errors.Join(err, s.dropStream(ctx, pk))
			}
			if err != nil {
				left = append(left, h)
				continue
			}
			// Unless a newer job's write moved it since the read.
			cond = aws.String("du = :du")
			values = map[string]types.AttributeValue{":du": num(getN(h, "du"))}
		}
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.table, Key: key(pk, sk), ConditionExpression: cond, ExpressionAttributeValues: values,
		})
		var ccf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &ccf) {
			left = append(left, h)
		}
	}
	for _, h := range left {
		// Best effort: a hook this cannot move keeps the due time it has,
		// and a sweep reads it again then.
		_, _ = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: key(pk, getS(h, "sk")),
			UpdateExpression:          aws.String("SET du = :later"),
			ConditionExpression:       aws.String("du = :du"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":du": num(getN(h, "du")), ":later": num(now + endRetryMs)},
		})
	}
}

// endHooks reads the items of a job's partition other than the job item
// (its payload items and its end item) that belong to a job whose deadline
// is upTo or earlier: the ones dropHooks deletes, payload items first and
// the end item last. A job published again under the same id has a later
// deadline, so its own items are never among them.
func (s *Store) endHooks(ctx context.Context, pk string, upTo int64) ([]map[string]types.AttributeValue, error) {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ConsistentRead:            aws.Bool(true),
	}
	var items, end []map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query job items: %w", err)
		}
		for _, av := range out.Items {
			sk := getS(av, "sk")
			if sk == skJob {
				continue
			}
			dl := getN(av, "dl")
			if _, ok := av["dl"]; !ok {
				// A payload item written without its deadline: its TTL
				// is the deadline plus ttlGraceSeconds.
				dl = (getN(av, "ttl") - ttlGraceSeconds) * 1000
			}
			if dl > upTo {
				continue
			}
			if sk == skEnd {
				end = append(end, av)
			} else {
				items = append(items, av)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return append(items, end...), nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// noteChurn records one unsealed expiry for a pair and says whether it
// crosses the threshold for a report. The record is written in the same
// transaction as the expiry, conditioned on the version read, so every
// expiry is counted exactly once across replicas and a crossing is reported
// by exactly one of them.
func (s *Store) noteChurn(ctx context.Context, siteID, owner string, now int64) (types.TransactWriteItem, *store.UnsealedChurn, error) {
	pk := churnPK(siteID, owner)
	av, err := s.getRaw(ctx, pk, skChurn)
	if err != nil {
		return types.TransactWriteItem{}, nil, err
	}
	var times []int64
	if l, ok := av["times"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				t, _ := strconv.ParseInt(n.Value, 10, 64)
				times = append(times, t)
			}
		}
	}
	// Timestamps rather than a counter: the threshold is "inside a window",
	// and a counter would need something to reset it.
	times = append(times, now)
	kept := times[:0]
	for _, t := range times {
		if now-t <= store.ChurnWindowMs {
			kept = append(kept, t)
		}
	}
	item := map[string]types.AttributeValue{
		"pk": str(pk), "sk": str(skChurn), "ver": num(getN(av, "ver") + 1),
		"ttl": num(now/1000 + store.ChurnQuietMs/1000 + 3600),
	}
	list := make([]types.AttributeValue, 0, len(kept))
	for _, t := range kept {
		list = append(list, num(t))
	}
	item["times"] = &types.AttributeValueMemberL{Value: list}
	_, told := av["rep"]
	rep := getN(av, "rep")
	var report *store.UnsealedChurn
	if len(kept) >= store.ChurnExpiries && (!told || now-rep >= store.ChurnQuietMs) {
		rep, told = now, true
		report = &store.UnsealedChurn{SiteID: siteID, Owner: owner, Expiries: len(kept), WindowMs: store.ChurnWindowMs}
	}
	if told {
		item["rep"] = num(rep)
		// Keep the record as long as the quiet period it enforces.
		item["ttl"] = num(rep/1000 + store.ChurnQuietMs/1000 + 3600)
	}
	put := &types.Put{TableName: &s.table, Item: item}
	if av == nil {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("ver = :v")
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(getN(av, "ver"))}
	}
	return types.TransactWriteItem{Put: put}, report, nil
}

// report tells the churn callback. A report is evidence about the sweep,
// not part of it: a callback that panics must not stop jobs being requeued.
func (s *Store) report(c store.UnsealedChurn) {
	if s.onChurn == nil {
		return
	}
	defer func() { _ = recover() }()
	s.onChurn(c)
}

// repairSlots checks a pair's unsealed set once its grants' awaiting
// windows are well past. Every member should have been released by a seal,
// a completion, the sweep, or its claim's lost race; one whose job is gone
// or has moved on (a job TTL deleted before any sweep saw it, a replica that
// died between the claim's two writes or before freeing a slot) would hold
// the slot for ever and throttle the pair while looking exactly like a
// quiet site.
//
// A member is judged only once its own awaiting window and then the
// window's length again are over: until then its claim's job write may
// still be on its way (grant writes the member first), and removing the
// member would let a live grant exist outside the set. After that, a member
// whose job is not awaiting under its lease is removed; if the claim's job
// write lands later still, it lands a grant whose window has passed, which
// no reader counts as live. A lease that stopped being unsealed never
// becomes unsealed again, so removing it after a read cannot undo a newer
// claim.
func (s *Store) repairSlots(ctx context.Context, pk, sk string, now int64) error {
	av, err := s.getRaw(ctx, pk, sk)
	if err != nil || av == nil {
		return err
	}
	oldDue := getN(av, "du")
	if oldDue > now {
		return nil
	}
	var dead []string
	latest := int64(0)
	site := unsealedSite(pk)
	for _, m := range getSS(av, "held") {
		lease, jobID, window := parseSlotMember(m)
		if window+s.awaitingMs > now {
			// Too early to judge.
			latest = max(latest, window)
			continue
		}
		alive := false
		if jobID != "" && site != "" {
			j, ok, err := s.readJob(ctx, jobPK(site, jobID))
			if err != nil {
				return err
			}
			if ok && j.Lease == lease && j.State == string(store.StateAwaitingPayload) {
				// Lapsed, and the sweep that ends it frees the slot.
				alive = true
				latest = max(latest, j.AwaitingUntil)
			}
		}
		if !alive {
			dead = append(dead, m)
		}
	}
	if len(dead) > 0 {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: key(pk, sk),
			UpdateExpression:          aws.String("DELETE held :dead"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":dead": strSet(dead...)},
		})
		if err != nil {
			return fmt.Errorf("repair unsealed set: %w", err)
		}
	}
	// Check again later while grants are live; leave the index when empty.
	// Both conditioned on the due time read, so a claim that moved it wins.
	upd := &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(pk, sk),
		ExpressionAttributeValues: map[string]types.AttributeValue{":old": num(oldDue)},
	}
	if latest > 0 {
		upd.UpdateExpression = aws.String("SET du = :new")
		upd.ConditionExpression = aws.String("du = :old")
		upd.ExpressionAttributeValues[":new"] = num(max(latest, now) + s.awaitingMs)
	} else {
		upd.UpdateExpression = aws.String("REMOVE dk, du")
		upd.ConditionExpression = aws.String("du = :old AND attribute_not_exists(held)")
	}
	_, err = s.db.UpdateItem(ctx, upd)
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("reschedule unsealed check: %w", err)
	}
	return nil
}
