package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

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
