package dynamo

import (
	"github.com/aws/aws-sdk-go-v2/aws"
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
	return types.TransactWriteItem{Update: &types.Update{
		TableName:           &s.table,
		Key:                 key(pk, skUnsealed),
		UpdateExpression:    aws.String("ADD held :l SET dk = :dk, du = :du"),
		ConditionExpression: aws.String("attribute_not_exists(held) OR size(held) < :cap"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":l": strSet(leaseID), ":dk": str(dueKey(pk, s.shards)), ":du": num(checkAt),
			":cap": num(store.UnsealedPerPair),
		},
	}}
}

// releaseSlot frees the pair slot of the job's current (awaiting) lease.
func (s *Store) releaseSlot(j *jobItem) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 &s.table,
		Key:                       key(unsealedPK(j.Site, j.Owner), skUnsealed),
		UpdateExpression:          aws.String("DELETE held :l"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": strSet(j.Lease)},
	}}
}

// putLease writes the lease pointer a holder-scoped call resolves through.
func (s *Store) putLease(j *jobItem, leaseID, runnerID string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: &s.table,
		Item: map[string]types.AttributeValue{
			"pk": str(leasePK(leaseID)), "sk": str(skLease),
			"site": str(j.Site), "jobId": str(j.JobID), "runner": str(runnerID), "ttl": num(j.TTL),
		},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}
}

func (s *Store) addHolder(j *jobItem, runnerID string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &s.table,
		Key:       key(holderPK(runnerID, j.JobID), skHolder),
		// The latest claim's deadline keeps the entry: TTL only collects
		// entries left empty by the requeues and deletions that end holds.
		UpdateExpression:         aws.String("ADD sites :s SET #t = :t"),
		ExpressionAttributeNames: map[string]string{"#t": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":s": strSet(j.Site), ":t": num(j.TTL),
		},
	}}
}

func (s *Store) addCancel(runnerID, jobPK string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 &s.table,
		Key:                       key(cancelsPK(runnerID), skCancels),
		UpdateExpression:          aws.String("ADD jobs :j"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":j": strSet(jobPK)},
	}}
}

// endClaim is what ending j's grant (requeue or delete) changes besides the
// job: the lease pointer goes, the runner no longer holds the id, and an
// unsealed grant frees its pair slot.
func (s *Store) endClaim(j *jobItem) []types.TransactWriteItem {
	if !j.claimed() {
		return nil
	}
	items := []types.TransactWriteItem{
		{Delete: &types.Delete{TableName: &s.table, Key: key(leasePK(j.Lease), skLease)}},
		{Update: &types.Update{
			TableName:                 &s.table,
			Key:                       key(holderPK(j.Runner, j.JobID), skHolder),
			UpdateExpression:          aws.String("DELETE sites :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": strSet(j.Site)},
		}},
	}
	if j.State == string(store.StateAwaitingPayload) {
		items = append(items, s.releaseSlot(j))
	}
	return items
}
