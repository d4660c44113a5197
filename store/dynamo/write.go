package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/store"
)

// maxAttempts bounds every decide-and-write loop. A write that loses its
// condition this often is under contention the caller should see.
const maxAttempts = 8

// jobWrite is one transition: the job's new image, the version it was
// decided on, and the other items that must change with it in the same
// transaction. There is no delete: a removed job is written as its
// tombstone, so that every write, removals included, stamps a wid that
// tells the writer afterwards whether it was its own write that landed.
type jobWrite struct {
	pk string
	// put is the new image (a tombstone for a removal).
	put *jobItem
	// ver is the version the decision was made on; 0 means the job must not
	// exist yet.
	ver   int64
	extra []types.TransactWriteItem
	// unsealed is the job as it was when this write ends its unsealed
	// grant: the pair's slot is freed once the write committed (freeSlot).
	unsealed *jobItem
	// mine, when set, recognises this write in a later image of the job:
	// after an ambiguous error the read-back may find the wid already
	// overwritten by a write that came after this one (a seal landing on a
	// grant whose acknowledgement was lost, a renewal on a completion), and
	// without it the caller would be told it lost a race it won. It names
	// what only this write put there and every later write keeps: a grant's
	// lease id, or a seal's, a completion's or a release's mark.
	mine func(*jobItem) bool
}

// outcome is what a write did.
type outcome int

const (
	// committed: the write took effect.
	committed outcome = iota
	// lostRace: the job's condition failed: someone else changed it.
	// Decide again on what is there now.
	lostRace
	// extraFailed: the job was as expected but a condition on another item
	// in the transaction failed (failedAt says which).
	extraFailed
)

// commit runs w. A failed condition is an answer (lostRace/extraFailed),
// not an error. An error that leaves it unknown whether the write took
// effect (throttling, a conflict, a timeout, a lost acknowledgement) is
// resolved by reading the job back: the write stamped a fresh wid, so the
// item carries it when the write committed and nothing was written over it
// since. A write whose effect a caller can observe, and which another write
// can cover before the read-back (a grant the site seals at once, a seal the
// device fetches at once, a completion a heartbeat renews, a release
// another runner claims), names what else marks it (jobWrite.mine). If it
// did not commit, the same write is tried again; its condition is evaluated
// afresh.
//
// A removal could not be told apart this way if it deleted the item: "the
// job is gone" is as true after another replica's delete as after ours, and
// a sweep that counted it would report the same job removed twice. That is
// why removals write a tombstone.
func (s *Store) commit(ctx context.Context, w jobWrite) (outcome, int, error) {
	out, failedAt, err := s.commitJob(ctx, w)
	if err == nil && out == committed && w.unsealed != nil {
		s.freeSlot(ctx, w.unsealed)
	}
	return out, failedAt, err
}

func (s *Store) commitJob(ctx context.Context, w jobWrite) (outcome, int, error) {
	wid := newWID()
	w.put.WID = wid
	w.put.Ver = w.ver + 1
	w.put.index(s.shards, s.finishedShards)
	var lastErr error
	ambiguous := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		out, failedAt, err := s.tryWrite(ctx, w, wid)
		// After an ambiguous error, a failed condition may be this write's
		// own earlier attempt, committed: answering lostRace then would
		// have the caller re-decide on its own write (a result told
		// "duplicate", a grant nobody was given).
		if err == nil && (out == committed || !ambiguous) {
			return out, failedAt, nil
		}
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return 0, 0, err
			}
			if refusedOutright(err) {
				// Nothing was written and the same request would be
				// refused again: an error, not contention, so no caller
				// is told to retry what cannot succeed.
				return 0, 0, fmt.Errorf("write %q: %w", w.pk, err)
			}
		}
		ambiguous = true
		done, rerr := s.landed(ctx, w, wid)
		if rerr != nil {
			lastErr = rerr
			continue
		}
		if done {
			return committed, -1, nil
		}
		if err == nil {
			return out, failedAt, nil
		}
	}
	return 0, 0, fmt.Errorf("write %q: %w (last error: %v)", w.pk, ErrContention, lastErr)
}

// landed reads the job back after an ambiguous error and says whether the
// write took effect.
func (s *Store) landed(ctx context.Context, w jobWrite, wid string) (bool, error) {
	av, err := s.getRaw(ctx, w.pk, skJob)
	if err != nil {
		return false, err
	}
	if av == nil {
		return false, nil
	}
	j, err := unmarshalJob(av)
	if err != nil {
		return false, err
	}
	return j.WID == wid || (w.mine != nil && w.mine(j)), nil
}

func (s *Store) tryWrite(ctx context.Context, w jobWrite, wid string) (outcome, int, error) {
	cond, names, values := jobCondition(w.ver)
	item, err := w.put.marshal()
	if err != nil {
		return 0, 0, err
	}
	if len(w.extra) == 0 {
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.table, Item: item,
			ConditionExpression: &cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return lostRace, 0, nil
		}
		return committed, -1, err
	}

	items := make([]types.TransactWriteItem, 0, len(w.extra)+1)
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName: &s.table, Item: item,
		ConditionExpression: &cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}})
	items = append(items, w.extra...)
	// The same token on a retry makes the service answer a committed
	// transaction with success instead of re-running it (10 minutes).
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(wid)}
	_, err = s.db.TransactWriteItems(ctx, in)
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		conflict := false
		for i, r := range tce.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				if i == 0 {
					return lostRace, 0, nil
				}
				return extraFailed, i - 1, nil
			case "TransactionConflict":
				conflict = true
			}
		}
		if conflict {
			// Another transaction was on one of these items. Nothing was
			// written; deciding again on fresh reads is the caller's job.
			return lostRace, 0, nil
		}
		return 0, 0, err
	}
	return committed, -1, err
}

// jobCondition is "the job is still the version the decision was made on".
func jobCondition(ver int64) (string, map[string]string, map[string]types.AttributeValue) {
	if ver == 0 {
		return "attribute_not_exists(pk)", nil, nil
	}
	return "ver = :ver", nil, map[string]types.AttributeValue{":ver": num(ver)}
}

// backoff waits a little before retrying after throttling or a lost answer.
// Real time, not the store clock: it paces requests and decides nothing.
func backoff(ctx context.Context, attempt int) {
	_ = clock.Sleep(ctx, time.Duration(attempt*attempt)*2*time.Millisecond)
}

func newWID() string { return store.NewLeaseID() }

// newMark is a seal's, a completion's or a release's mark (jobItem.SealMark):
// 64 random bits, unique among one job's writes, and short, because every
// later write of the job carries it.
func newMark() string {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (it aborts the program instead).
	return hex.EncodeToString(b[:])
}

// isCanceled reports a transaction DynamoDB cancelled: a condition failed
// or another transaction was on one of its items. Nothing was written.
func isCanceled(err error) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce)
}

// refusedOutright reports a request DynamoDB rejected as invalid (a key
// over its size limit, an item over 400 KB, a string that is not UTF-8):
// nothing was written, and retrying the same request cannot change that.
func refusedOutright(err error) bool {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ValidationError" {
				return true
			}
		}
		return false
	}
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException"
}
