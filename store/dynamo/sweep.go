package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	return s.sweep(ctx, 0)
}

// SweepInline is Sweep bounded for a request path: it handles at most
// inlineLimit due items, earliest due first, so a backlog left by an outage
// is drained by the scheduled sweeper and many requests, not carried inside
// one. An unsealed set due for repair is an item like a job: the bound is
// on the work a request does, so it may move fewer jobs than the bound.
func (s *Store) SweepInline(ctx context.Context) (store.SweepResult, error) {
	return s.sweep(ctx, s.inlineLimit)
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

// sweep handles up to limit due items (0: every one).
//
// With a ServerClock it first makes sure the clock is within
// MaxClockUncertainty of DynamoDB's; if not, it decides no expiry: the
// scheduled sweep fails with ErrClockUncertain (counted and alarmed), and
// an in-line sweep moves nothing, so the request it runs in still answers.
func (s *Store) sweep(ctx context.Context, limit int) (store.SweepResult, error) {
	ctx = context.WithValue(ctx, sweepingKey{}, true)
	settled, err := s.clockSettled(ctx)
	if err != nil {
		return store.SweepResult{}, err
	}
	if !settled {
		if limit > 0 {
			return store.SweepResult{Requeued: []store.Job{}, Removed: []store.Job{}}, nil
		}
		return store.SweepResult{}, ErrClockUncertain
	}
	now := s.now()
	type swept struct {
		seq string
		job store.Job
	}
	var requeued, removed []swept
	var reports []store.UnsealedChurn
	// The shards are read at once, then what they name is handled in turn.
	due := make([][]dueEntry, s.shards)
	err = each(s.shards, func(shard int) error {
		in := &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk AND du <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": str(dueShardKey(shard)), ":now": num(now),
			},
		}
		if limit > 0 {
			// Each shard's earliest limit are a superset of its share of
			// the earliest limit overall.
			in.Limit = aws.Int32(int32(limit))
		}
		for {
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return fmt.Errorf("query due: %w", err)
			}
			for _, av := range out.Items {
				due[shard] = append(due[shard], dueEntry{pk: getS(av, "pk"), sk: getS(av, "sk"), du: getN(av, "du")})
			}
			if len(out.LastEvaluatedKey) == 0 || limit > 0 {
				return nil
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	})
	if err != nil {
		return store.SweepResult{}, err
	}
	var entries []dueEntry
	for _, d := range due {
		entries = append(entries, d...)
	}
	if limit > 0 && len(entries) > limit {
		slices.SortFunc(entries, func(a, b dueEntry) int {
			if c := cmp.Compare(a.du, b.du); c != 0 {
				return c
			}
			return strings.Compare(a.pk+"\x00"+a.sk, b.pk+"\x00"+b.sk)
		})
		entries = entries[:limit]
	}
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.pk, "J#"):
			r, err := s.sweepJob(ctx, e.pk, now)
			if err != nil {
				return store.SweepResult{}, err
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
		case strings.HasPrefix(e.pk, "U#"):
			if err := s.repairSlots(ctx, e.pk, e.sk, now); err != nil {
				return store.SweepResult{}, err
			}
		}
	}
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
	for _, c := range reports {
		s.report(c)
	}
	return res, nil
}

type sweepDid int

const (
	didNothing sweepDid = iota
	didRequeue
	didRemove
	// didExpire: a finished job past its deadline, made a tombstone for
	// its S3 objects' sake. Not reported: it finished, nothing was lost.
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
		var (
			w      = jobWrite{pk: pk, ver: j.Ver, unsealed: unsealed(j)}
			did    sweepDid
			report *store.UnsealedChurn
			left   *jobItem
			drop   []string
		)
		switch {
		// A finished job is listed to a collect for the grace past its
		// deadline (store.ResultGraceMs); TTL deletes it after that. A sweep
		// reaches one only through a due entry read before the result's
		// write moved it off the due index (a result accepted just before
		// the deadline, written as the sweep ran): it must not take the
		// result the relay just accepted.
		case j.State == string(store.StateDone) && j.Deadline+store.ResultGraceMs > now:
			return sweepResult{}, nil

		// Past its deadline, in any state: removed, its item overwritten by a
		// tombstone that keeps no ciphertext (TTL collects it). A daemon
		// mid-flight learns through RenewLeases, which reports a grant that
		// is gone as lost.
		case j.Deadline <= now:
			w.put = j.tombstone()
			if j.State == string(store.StateDone) {
				// Only a finished job with S3 objects is still in the due
				// index: it expires unreported, its objects go.
				did = didExpire
			}
			if did == didNothing {
				did = didRemove
			}
			left, drop = j, []string{j.PayloadS3, j.ResultS3}

		// The site never sealed.
		case j.State == string(store.StateAwaitingPayload) && j.AwaitingUntil <= now:
			next := *j
			if s.onChurn != nil {
				item, c, err := s.noteChurn(ctx, j.Site, j.Owner, now)
				if err != nil {
					return sweepResult{}, err
				}
				w.extra = append(w.extra, item)
				report = c
			}
			// From here it is that device's job or nobody's (sticky
			// re-offer), set before the requeue clears the holder.
			if next.ReofferTo == "" {
				next.ReofferTo = j.Runner
			}
			attempts := j.SealAttempts + 1
			if attempts >= store.SealAttemptsBeforeEviction {
				w.put = j.tombstone()
				did, left, drop = didRemove, &next, []string{j.PayloadS3, j.ResultS3}
				// In the same transaction as the delete: an eviction the
				// site is never told of is a job lost without a word.
				notice, err := s.evictionNotice(j)
				if err != nil {
					return sweepResult{}, err
				}
				w.extra = append(w.extra, notice)
			} else {
				next.SealAttempts = attempts
				next.requeue()
				w.put = &next
				did, left = didRequeue, &next
			}

		// The holder stopped renewing.
		case (j.State == string(store.StateReady) || j.State == string(store.StateRunning)) && j.claimed() && j.LeaseExp <= now:
			next := *j
			next.requeue()
			w.put = &next
			did, left, drop = didRequeue, &next, []string{j.PayloadS3}

		case j.DU > now:
			// The index lagged a change that moved the due time.
			return sweepResult{}, nil

		default:
			// Due early: a sealed grant keeps its earlier due time until a
			// sweep reaches it (jobItem.index). Now write the real one.
			next := *j
			next.DU = 0
			w.put, w.unsealed = &next, nil
		}

		if did == didRemove || did == didExpire {
			if err := s.loadEnvelopes(ctx, left); err != nil && !errors.Is(err, ErrNoBucket) {
				return sweepResult{}, err
			}
		}
		out, _, err := s.commit(ctx, w)
		if err != nil {
			return sweepResult{}, err
		}
		if out != committed {
			continue
		}
		if did == didNothing {
			return sweepResult{}, nil
		}
		s.dropObjects(context.WithoutCancel(ctx), drop...)
		if did == didRequeue {
			s.dropPayloadItem(context.WithoutCancel(ctx), j)
		}
		job, err := left.job()
		if err != nil {
			return sweepResult{}, err
		}
		return sweepResult{did: did, seq: j.Seq, job: job, churn: report}, nil
	}
	return sweepResult{}, fmt.Errorf("sweep %q: %w", pk, ErrContention)
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
	site := strings.TrimPrefix(pk, "U#")
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
