package dynamo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// claimSlack is how many candidates past the pair cap a claim reads from
// each queue partition. A partition holds only jobs of one (site, owner,
// kind, audience), so every candidate passes the route, kind and audience
// guards; only a refusal or a not-before of this very runner can skip one,
// and a pair can be granted at most UnsealedPerPair per claim anyway.
const claimSlack = 6

// Claim grants queued work. It sweeps in-line (bounded) first, reads a
// bounded number of candidates from each queue partition the device may
// take from (its routes times its kinds, private partitions only for its
// owner's own routes, streaming partitions only if it opted in to streams,
// and its sticky partition), walks them in enqueue order with the
// contract's guards, and grants each with single writes, no transaction
// (grant): a holder hint, then the grant's member into the pair's unsealed
// set (conditioned on the cap), then the job (conditioned on the version it
// was read at; if that loses, the member is taken out again). Cost depends
// on the route set, never on how deep the queue is.
func (s *Store) Claim(ctx context.Context, in store.ClaimInput) ([]store.Claimed, error) {
	_, handled, err := s.sweepInline(ctx)
	if err != nil {
		return nil, err
	}
	// What the in-line sweep's shard left of the request's budget goes to
	// the lapsed and expired jobs this claim reads itself.
	budget := s.inlineLimit - handled
	now := s.now()
	if in.Max <= 0 {
		return []store.Claimed{}, nil
	}
	routes := map[store.Route]bool{}
	for _, r := range in.Routes {
		routes[r] = true
	}
	kinds := map[string]bool{}
	for _, k := range in.Kinds {
		kinds[k] = true
	}
	candidates, late, err := s.claimCandidates(ctx, claimPartitions(in, routes, kinds), int32(min(in.Max, store.UnsealedPerPair)+claimSlack), now)
	if err != nil {
		return nil, err
	}
	// Jobs past their deadline at the head of a partition are removed here,
	// within the budget, as the sweep would: a claim that reads them is
	// the request that finds them due, whichever shard their entry is on.
	if _, _, err := s.sweepNamed(ctx, late, budget); err != nil {
		return nil, err
	}
	budget = max(0, budget-len(late))
	device, err := holderDeviceOf(in.Device)
	if err != nil {
		return nil, err
	}
	return s.grantCandidates(ctx, candidates, in, routes, kinds, device, budget, now)
}

// claimPartitions are the queue partitions a claim reads, in key order,
// then the device's sticky partition.
func claimPartitions(in store.ClaimInput, routes map[store.Route]bool, kinds map[string]bool) []string {
	var partitions []string
	// Streaming partitions only for a device that opted in: the others
	// never read a job they may not take.
	classes := []bool{false}
	if in.Streams {
		classes = append(classes, true)
	}
	for r := range routes {
		for k := range kinds {
			for _, streaming := range classes {
				partitions = append(partitions, queueKey(r.SiteID, r.Owner, k, false, streaming))
				if r.Owner == in.Owner {
					partitions = append(partitions, queueKey(r.SiteID, r.Owner, k, true, streaming))
				}
			}
		}
	}
	slices.Sort(partitions)
	return append(partitions, stickyQueueKey(in.RunnerID))
}

// claimCandidates reads up to limit jobs from each partition: the
// candidates in enqueue order, and the sorted keys of the jobs found past
// their deadline.
func (s *Store) claimCandidates(ctx context.Context, partitions []string, limit int32, now int64) ([]*jobItem, []string, error) {
	// The partitions are read at once: a claim's latency is one query's,
	// whatever the route set.
	found := make([][]*jobItem, len(partitions))
	expired := make([][]string, len(partitions))
	err := each(len(partitions), func(i int) error {
		qk := partitions[i]
		// The sticky partition can hold jobs of routes this device no
		// longer has; read it deeper so those cannot hide its own.
		n := limit
		if strings.HasPrefix(qk, "R#") {
			n = limit * 2
		}
		items, past, err := s.queue(ctx, qk, n, now)
		found[i], expired[i] = items, past
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var late []string
	for _, pks := range expired {
		late = append(late, pks...)
	}
	slices.Sort(late)
	var candidates []*jobItem
	for _, items := range found {
		candidates = append(candidates, items...)
	}
	slices.SortFunc(candidates, func(a, b *jobItem) int { return strings.Compare(a.Seq, b.Seq) })
	return candidates, late, nil
}

// holderDeviceOf is the device as a grant's holder hint stores it.
func holderDeviceOf(id protocol.PublicIdentity) (holderDevice, error) {
	device := holderDevice{packed: packIdentity(id)}
	if device.packed == nil {
		b, err := json.Marshal(id)
		if err != nil {
			return holderDevice{}, fmt.Errorf("encode device: %w", err)
		}
		device.json = string(b)
	}
	return device, nil
}

// grantCandidates walks the candidates in enqueue order and grants each
// that passes, up to in.Max, skipping the pairs whose unsealed set is
// full.
func (s *Store) grantCandidates(ctx context.Context, candidates []*jobItem, in store.ClaimInput, routes map[store.Route]bool, kinds map[string]bool, device holderDevice, budget int, now int64) ([]store.Claimed, error) {
	granted := []store.Claimed{}
	full := map[store.Route]bool{}
	for _, c := range candidates {
		if len(granted) >= in.Max {
			break
		}
		pair := store.Route{SiteID: c.Site, Owner: c.Owner}
		if full[pair] {
			continue
		}
		if c.lapsedGrant(now) {
			// A grant whose awaiting window or lease is over, still in its
			// queue partition (jobItem.index): swept here, as the sweep
			// would (sticky re-offer, seal attempts, eviction), and judged
			// again as it was left.
			if budget <= 0 {
				continue
			}
			budget--
			fresh, ok, err := s.resweep(ctx, c.PK)
			if err != nil {
				return grantedOr(granted, err)
			}
			if !ok {
				continue
			}
			c = fresh
		}
		claimed, result, err := s.claimOne(ctx, c, in, routes, kinds, device, now)
		if err != nil {
			return grantedOr(granted, err)
		}
		switch result {
		case committed:
			granted = append(granted, claimed)
		case extraFailed:
			// The pair's unsealed set is full: left queued, not refused.
			full[pair] = true
		}
	}
	return granted, nil
}

// resweep sweeps one job and reads it again as the sweep left it; false
// when it is gone.
func (s *Store) resweep(ctx context.Context, pk string) (*jobItem, bool, error) {
	if _, _, err := s.sweepNamed(ctx, []string{pk}, 1); err != nil {
		return nil, false, err
	}
	return s.readJob(ctx, pk)
}

// grantedOr returns the grants already made, not orphaned, when there are
// any: the error is about a candidate that was not granted.
func grantedOr(granted []store.Claimed, err error) ([]store.Claimed, error) {
	if len(granted) > 0 {
		return granted, nil
	}
	return nil, err
}

// claimOne judges one candidate and grants it if it passes. The candidate
// came from the queue index, which lags the table; the grant is
// conditioned on the version judged, and when that fails the job is read
// again, strongly consistently, and judged afresh, so a job that is still
// claimable is not skipped because something else touched it.
func (s *Store) claimOne(ctx context.Context, c *jobItem, in store.ClaimInput, routes map[store.Route]bool, kinds map[string]bool, device holderDevice, now int64) (store.Claimed, outcome, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			fresh, ok, err := s.readJob(ctx, c.PK)
			if err != nil {
				return store.Claimed{}, 0, err
			}
			if !ok {
				return store.Claimed{}, lostRace, nil
			}
			c = fresh
		}
		stub, ok := store.Claimable(s.candidate(c, in), in, routes, kinds, now)
		if !ok {
			return store.Claimed{}, lostRace, nil
		}
		claimed, result, err := s.grant(ctx, c, stub, in, device, now)
		if err != nil || result != lostRace {
			return claimed, result, err
		}
	}
	return store.Claimed{}, lostRace, nil
}

// candidate is what the claim guards (store.Claimable) read of c. The
// pair's unsealed cap is not among them here: the grant's own write into
// the pair's set enforces it (grant).
func (s *Store) candidate(c *jobItem, in store.ClaimInput) store.Candidate {
	return store.Candidate{
		State: store.State(c.State), Gone: s.absent(c), SiteID: c.Site, Owner: c.Owner, Kind: c.Kind,
		Audience: c.Audience, DeadlineAt: c.Deadline, ReofferTo: c.ReofferTo,
		RefusedBy: c.RefusedBy, RetryAfter: c.RetryAfter[in.RunnerID], Cancelled: c.Cancelled,
		Stub: c.stub,
	}
}

// grant claims one candidate, in two single writes after the holder hint:
// the grant's member into its pair's unsealed set (conditioned on the cap),
// then the job (conditioned on the version judged: the candidate came from
// the queue index, which lags the table, so if the job moved since, the
// write fails and the member is taken out again). No transaction: its two
// items and its index writes would be billed double on every claim.
//
// Why the cap still holds across replicas (doc.go has the whole argument):
// the member is in the set before the job can be awaiting under its lease,
// and the set's check removes a member whose job is not awaiting under it
// only once the member's awaiting window (and a window's slack) is over.
// So a job write that lands after its member was removed, from a replica
// frozen between the two writes, lands a grant whose window is already
// past: nothing counts it as live (Awaiting leaves it out, the sweep ends
// it), and every live grant is in its pair's set.
func (s *Store) grant(ctx context.Context, c *jobItem, stub protocol.JobStub, in store.ClaimInput, device holderDevice, now int64) (store.Claimed, outcome, error) {
	leaseID, err := s.newLease(ctx, c.Site)
	if err != nil {
		return store.Claimed{}, 0, err
	}
	if err := s.putHint(ctx, in.RunnerID, c); err != nil {
		return store.Claimed{}, 0, err
	}
	next := *c
	next.State = string(store.StateAwaitingPayload)
	next.Runner, next.HOwner, next.Lease = in.RunnerID, in.Owner, leaseID
	next.Device, next.DeviceB = device.json, device.packed
	next.LeaseExp = now + in.LeaseMs
	// Not the lease: this bounds how long we wait for the site.
	next.AwaitingUntil = now + s.awaitingMs
	// The slot is checked once the awaiting window is well past: by then
	// the sweep has freed it, unless the job vanished without a sweep.
	took, err := s.takeSlot(ctx, c, slotMember(leaseID, c.JobID, next.AwaitingUntil), next.AwaitingUntil+s.awaitingMs)
	if err != nil {
		return store.Claimed{}, 0, err
	}
	if !took {
		// The pair's set is full: the job stays queued, not refused.
		return store.Claimed{}, extraFailed, nil
	}
	// The lease id is new, so a job that carries it carries this grant,
	// whatever was written over it since (a seal, a fetch).
	out, _, err := s.commit(ctx, jobWrite{pk: c.PK, put: &next, ver: c.Ver, mine: func(j *jobItem) bool { return j.Lease == leaseID }})
	if err == nil && out == lostRace {
		// The grant was not made: give the slot back. (After an error it
		// is unknown whether the job write landed, so the member stays for
		// the set's check to judge once its window is over.)
		s.freeSlot(ctx, &next)
	}
	if err != nil || out != committed {
		return store.Claimed{}, out, err
	}
	return store.Claimed{
		ClaimedStub:   protocol.Claimed(stub, protocol.Lease{ID: leaseID, RunnerID: in.RunnerID, ExpiresAt: next.LeaseExp}, nil),
		AwaitingUntil: next.AwaitingUntil,
	}, committed, nil
}

// holderDevice is the claiming device's identity as the job stores it:
// packed into bytes, or as JSON when it does not pack (compact.go).
type holderDevice struct {
	json   string
	packed []byte
}

// claimExpiredSkip is how many jobs past their deadline a claim reads past
// in one queue partition. Such a job keeps its place until a sweep removes
// it, and with the in-line sweep bounded a partition can lead with a
// backlog of them after an outage; without reading past, a claim would be
// starved by work nobody may run while newer jobs wait behind it. Bounded
// so a claim's cost still does not follow the backlog.
const claimExpiredSkip = 100

// queue reads up to n of the oldest jobs in one queue partition that are
// not past their deadline, reading past at most claimExpiredSkip that are;
// past names those it read past, for the claim to remove.
func (s *Store) queue(ctx context.Context, qk string, n int32, now int64) (items []*jobItem, past []string, err error) {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		IndexName:                 aws.String("queue"),
		KeyConditionExpression:    aws.String("qk = :qk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":qk": str(qk)},
		Limit:                     aws.Int32(n),
	}
	items = make([]*jobItem, 0, n)
	skip := int32(claimExpiredSkip)
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, nil, fmt.Errorf("query queue: %w", err)
		}
		for _, av := range out.Items {
			j, err := unmarshalJob(av)
			if err != nil {
				return nil, nil, err
			}
			// Filtered here rather than by a FilterExpression, which bills
			// the same bytes read: the claim removes what it read past.
			if j.Deadline <= now {
				past = append(past, j.PK)
				skip--
				continue
			}
			items = append(items, j)
		}
		missing := n - int32(len(items))
		if missing <= 0 || len(out.LastEvaluatedKey) == 0 || skip <= 0 {
			return items, past, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		in.Limit = aws.Int32(min(missing, skip))
	}
}
