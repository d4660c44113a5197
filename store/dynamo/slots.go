package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// takeSlot adds a grant to its pair's unsealed set, on the condition that
// the set holds fewer than UnsealedPerPair: the cap, decided by DynamoDB on
// the one item every replica's claims of the pair write, so it holds across
// replicas. It is a single UpdateItem, made before the job's own write
// (grant): the set is never short of a grant, which is what keeps the cap.
// The set (not a count) makes every release idempotent and lets the sweep
// check each member against its job; the item enters the due index for
// that check (at checkAt, unless a check is already scheduled).
//
// A write whose answer is lost is simply sent again: adding a member twice
// is adding it once, and the condition lets a set that already holds this
// member through, so a retry of a write that did commit is not refused as
// "full". It reports false when the set is full.
func (s *Store) takeSlot(ctx context.Context, j *jobItem, member string, checkAt int64) (bool, error) {
	pk, sk := s.unsealedKey(j)
	in := &dynamodb.UpdateItemInput{
		TableName: &s.table,
		Key:       key(pk, sk),
		// A due time already set is kept: moving it on every claim would
		// move the set's due index entry each time. The check it schedules
		// reschedules itself while grants are live (repairSlots).
		UpdateExpression:    aws.String("ADD held :l SET dk = if_not_exists(dk, :dk), du = if_not_exists(du, :du)"),
		ConditionExpression: aws.String("attribute_not_exists(held) OR size(held) < :cap OR contains(held, :m)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":l": strSet(member), ":m": str(member), ":dk": str(dueKey(pk+"\x00"+sk, s.shards)), ":du": num(checkAt),
			":cap": num(store.UnsealedPerPair),
		},
	}
	var lastErr error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		_, err := s.db.UpdateItem(ctx, in)
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &ccf):
			return false, nil
		case ctx.Err() != nil || refusedOutright(err):
			return false, fmt.Errorf("take unsealed slot: %w", err)
		}
		lastErr = err
	}
	return false, fmt.Errorf("take unsealed slot: %w (last error: %v)", ErrContention, lastErr)
}

// slotMember is a grant as its pair's unsealed set holds it: the lease, the
// job id (the set's key names the site, so the sweep's check can read the
// job back) and the end of the grant's awaiting window, so the check can
// tell a member whose job write may still be on its way (the window is not
// over) from one whose job write is lost for good (see repairSlots).
func slotMember(leaseID, jobID string, awaitingUntil int64) string {
	return leaseID + "\x00" + jobID + "\x00" + strconv.FormatInt(awaitingUntil, 10)
}

// parseSlotMember is slotMember read back. A member that does not parse has
// window 0: it is judged by its job alone.
func parseSlotMember(m string) (leaseID, jobID string, awaitingUntil int64) {
	leaseID, rest, _ := strings.Cut(m, "\x00")
	jobID, window, _ := strings.Cut(rest, "\x00")
	awaitingUntil, _ = strconv.ParseInt(window, 10, 64)
	return leaseID, jobID, awaitingUntil
}

// freeSlot takes the grant of j (as it was, awaiting-payload) out of its
// pair's unsealed set, after the write that moved the job out of
// awaiting-payload committed (or, at claim, after the job write lost its
// race: the grant was never made). Not in that write's transaction: a member
// whose job is no longer awaiting only makes the cap stricter for a moment,
// never looser, so the set may lag the job by one write, and a transaction
// would bill both items double on every seal. Deleting a member is
// idempotent, so it is retried through faults; one that still fails (or a
// replica that dies first) leaves a member the set's own check removes
// (repairSlots).
func (s *Store) freeSlot(ctx context.Context, j *jobItem) {
	ctx = context.WithoutCancel(ctx)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.table,
			Key:                       key(s.unsealedKey(j)),
			UpdateExpression:          aws.String("DELETE held :l"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":l": strSet(slotMember(j.Lease, j.JobID, j.AwaitingUntil))},
		})
		if err == nil || refusedOutright(err) {
			return
		}
	}
}

// unsealedKey is the pk and sk of j's pair's unsealed set under this
// store's count. A grant taken under a smaller count is in the set of its
// pair's shard then: freeSlot misses it, and the set's check removes it
// (Config.UnsealedShards).
func (s *Store) unsealedKey(j *jobItem) (pk, sk string) {
	return unsealedPK(j.Site, unsealedShard(j.Owner, s.unsealedShards)), unsealedSK(j.Owner)
}

// unsealed is j when a write that moves it on ends an unsealed grant (so
// the pair's slot must be freed after it), else nil.
func unsealed(j *jobItem) *jobItem {
	if j.claimed() && j.State == string(store.StateAwaitingPayload) {
		return j
	}
	return nil
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
