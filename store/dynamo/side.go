package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// The items that change in the same transaction as a job transition. Each
// is idempotent where it can be (set ADD/DELETE), so a transaction retried
// under its ClientRequestToken cannot double-count.

// takeSlot adds a lease to its pair's unsealed set, on the condition that
// the set holds fewer than UnsealedPerPair: the cap, decided by DynamoDB in
// the claim transaction, so it holds across replicas. The set (not a count)
// makes every release idempotent and lets the sweep check each member
// against its job. The item enters the due index for that check.
func (s *Store) takeSlot(j *jobItem, leaseID string, checkAt int64) types.TransactWriteItem {
	pk := unsealedPK(j.Site, j.Owner)
	leaseID = slotMember(leaseID, j.JobID)
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &s.table,
		Key:       key(pk, skUnsealed),
		// A due time already set is kept: moving it on every claim would
		// move the set's due index entry each time. The check it schedules
		// reschedules itself while grants are live (repairSlots).
		UpdateExpression:    aws.String("ADD held :l SET dk = if_not_exists(dk, :dk), du = if_not_exists(du, :du)"),
		ConditionExpression: aws.String("attribute_not_exists(held) OR size(held) < :cap"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":l": strSet(leaseID), ":dk": str(dueKey(pk, s.shards)), ":du": num(checkAt),
			":cap": num(store.UnsealedPerPair),
		},
	}}
}

// slotMember is a grant as its pair's unsealed set holds it: the lease and
// the job id, so the sweep's repair can read the job back (the set's key
// names the site).
func slotMember(leaseID, jobID string) string { return leaseID + "\x00" + jobID }

// freeSlot takes the grant of j (as it was, awaiting-payload) out of its
// pair's unsealed set, after the write that moved the job out of
// awaiting-payload committed. Not in that write's transaction: a member
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
			Key:                       key(unsealedPK(j.Site, j.Owner), skUnsealed),
			UpdateExpression:          aws.String("DELETE held :l"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":l": strSet(slotMember(j.Lease, j.JobID))},
		})
		if err == nil || refusedOutright(err) {
			return
		}
	}
}

// unsealed is j when a write that moves it on ends an unsealed grant (so
// the pair's slot must be freed after it), else nil.
func unsealed(j *jobItem) *jobItem {
	if j.claimed() && j.State == string(store.StateAwaitingPayload) {
		return j
	}
	return nil
}

func (s *Store) addCancel(runnerID, jobPK string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 &s.table,
		Key:                       key(cancelsPK(runnerID), skCancels),
		UpdateExpression:          aws.String("ADD jobs :j"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":j": strSet(jobPK)},
	}}
}
