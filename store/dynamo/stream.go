package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/store"
)

// The live-stream frame log (store.StreamLog; docs/streaming.md).
//
//	S#<site>\0<jobId>\0<leaseId>  SH                     header: site, jobId, lease,
//	                                                      sq (length), fn (next counter),
//	                                                      ended?, ei? (the end is the
//	                                                      daemon's interrupted one),
//	                                                      intr?, dl, dk/du
//	                                                      (while streaming), ttl
//	S#<site>\0<jobId>\0<leaseId>  SF#<seq:16>#<n:10>     frame: fn, fr, sq, kind, ct, ttl
//
// (Short names: "seq" is a string index key of the table and FROM is a
// reserved word.)
//
// One partition per lease's stream; frames sort by end offset (rindle's
// chunk rows: the end offset is the ordering key), then counter, so the
// end frame, which ends where the last chunk does, sorts after it, and
// "every frame ending at or after from" is one key range. A frame is its
// own item: appending to one growing item would bill every append on the
// whole text so far (O(n²)) and cap it at 400 KB.
//
// An append is one TransactWriteItems: a ConditionCheck on the job (this
// runner holds it under this lease, ready or running, lease and deadline
// not passed), the header's compare-and-set on (n, seq) (or its creation
// for frame 0), and the frame's put-if-absent. Its ClientRequestToken is
// derived from the stream and the frame's counters, so the SDK's retry of
// a request whose answer was lost is idempotent; any other retry reads the
// header and the frame back and is answered Duplicate.
//
// The frames are sealed text, so they go with their job: the stream's
// partition is named in the job's end item before its first frame is
// written, and the sweep that ends the job deletes the partition (header
// and frames) with the job's other ciphertext (sweep_ends.go, dropHooks). TTL
// is only the backstop.
//
// A streaming header sits in the due index under dk = SD#<shard> (the
// routing sweep reads D#<shard> only and never sees it) with du = the
// lease expiry as of the last append; SweepStreams reads what is due and
// marks the stream interrupted, or moves du to a renewed lease.

const (
	skStreamHeader = "SH"
	skFramePrefix  = "SF#"
	// frameKeyEnd sorts after every frame key.
	frameKeyEnd = "SF#~"
)

func streamPK(siteID, jobID, leaseID string) string {
	return "S#" + siteID + "\x00" + jobID + "\x00" + leaseID
}

func frameSK(seq, n int64) string { return fmt.Sprintf("%s%016d#%010d", skFramePrefix, seq, n) }

func (s *Store) streamDueKey(pk string) string { return "S" + dueKey(pk, s.shards) }

// requestToken names one append for DynamoDB's idempotency window: at
// most 36 characters, the same for the same stream and counters.
func requestToken(pk string, f store.StreamFrame) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%s", pk, f.N, f.From, f.Seq, f.Kind))
	return hex.EncodeToString(h[:18])
}

func parseHeader(av map[string]types.AttributeValue) *store.StreamHeader {
	if av == nil {
		return nil
	}
	_, ended := av["ended"]
	_, intr := av["intr"]
	_, ei := av["ei"]
	return &store.StreamHeader{Seq: getN(av, "sq"), N: getN(av, "fn"), Ended: ended, Interrupted: intr, EndInterrupted: ended && ei}
}

func parseFrame(av map[string]types.AttributeValue) store.StreamFrame {
	return store.StreamFrame{N: getN(av, "fn"), From: getN(av, "fr"), Seq: getN(av, "sq"), Kind: getS(av, "kind"), CT: getS(av, "ct")}
}

// AppendFrame implements store.StreamLog.
func (s *Store) AppendFrame(ctx context.Context, in store.AppendFrameInput) (store.AppendFrameResult, error) {
	f := in.Frame
	for attempt := 0; attempt < maxAttempts; attempt++ {
		j, err := s.grantFor(ctx, in.JobID, in.RunnerID, in.LeaseID)
		if err != nil {
			return store.AppendFrameResult{}, err
		}
		if r := holderRefusal(j, in.RunnerID); r != "" {
			return store.AppendFrameResult{Refused: r}, nil
		}
		if j.Lease != in.LeaseID {
			return store.AppendFrameResult{Refused: store.RefusedStaleLease}, nil
		}
		pk := streamPK(j.Site, j.JobID, in.LeaseID)
		hav, err := s.getRaw(ctx, pk, skStreamHeader)
		if err != nil {
			return store.AppendFrameResult{}, fmt.Errorf("append frame: %w", err)
		}
		h := parseHeader(hav)
		answer := func(r store.Refusal, dup bool) store.AppendFrameResult {
			out := store.AppendFrameResult{Refused: r, Duplicate: dup, Cancelled: j.Cancelled}
			if h != nil {
				out.Seq, out.N = h.Seq, h.N
			}
			return out
		}
		if h != nil && f.N < h.N {
			stored, err := s.getRaw(ctx, pk, frameSK(f.Seq, f.N))
			if err != nil {
				return store.AppendFrameResult{}, fmt.Errorf("append frame: %w", err)
			}
			if stored != nil && store.SameFrame(parseFrame(stored), f) {
				return answer("", true), nil
			}
			return answer(store.RefusedOutOfOrder, false), nil
		}
		now := s.now()
		switch {
		case j.State != string(store.StateReady) && j.State != string(store.StateRunning),
			h != nil && (h.Ended || h.Interrupted):
			return answer(store.RefusedTerminal, false), nil
		case j.LeaseExp <= now || j.Deadline <= now:
			return answer(store.RefusedStaleLease, false), nil
		}
		var next, seq int64
		if h != nil {
			next, seq = h.N, h.Seq
		}
		if f.N != next || f.From != seq {
			return answer(store.RefusedOutOfOrder, false), nil
		}
		if h == nil {
			// The stream's frames are ciphertext: named in the job's end
			// item before the first is written, so the end sweep deletes
			// them with the job.
			if err := s.noteEnd(ctx, j, endStreams, pk); err != nil {
				return store.AppendFrameResult{}, fmt.Errorf("append frame: %w", err)
			}
		}
		err = s.appendTx(ctx, j, pk, f, in.Interrupted, now)
		if err == nil {
			return store.AppendFrameResult{Seq: f.Seq, N: f.N + 1, Cancelled: j.Cancelled}, nil
		}
		var mismatch *types.IdempotentParameterMismatchException
		if !isCanceled(err) && !errors.As(err, &mismatch) {
			return store.AppendFrameResult{}, fmt.Errorf("append frame: %w", err)
		}
		// A condition failed or another writer was on an item: read again
		// and decide again (the frame may be ours, landed on an earlier
		// attempt whose answer was lost).
		backoff(ctx, attempt+1)
	}
	return store.AppendFrameResult{}, fmt.Errorf("append frame: %w", ErrContention)
}

// appendTx is the append's one transaction.
func (s *Store) appendTx(ctx context.Context, j *jobItem, pk string, f store.StreamFrame, interrupted bool, now int64) error {
	check := types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:           &s.table,
		Key:                 key(j.PK, skJob),
		ConditionExpression: aws.String("cl = :lease AND cr = :runner AND st IN (:ready, :running) AND ce > :now AND dl > :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":lease": str(j.Lease), ":runner": str(j.Runner), ":now": num(now),
			":ready": str(string(store.StateReady)), ":running": str(string(store.StateRunning)),
		},
	}}
	ended := f.Kind == store.FrameEnd
	var header types.TransactWriteItem
	if f.N == 0 {
		item := map[string]types.AttributeValue{
			"pk": str(pk), "sk": str(skStreamHeader), "site": str(j.Site), "jobId": str(j.JobID),
			"lease": str(j.Lease), "sq": num(f.Seq), "fn": num(1), "dl": num(j.Deadline), "ttl": num(j.TTL),
		}
		if ended {
			item["ended"] = &types.AttributeValueMemberBOOL{Value: true}
			if interrupted {
				item["ei"] = &types.AttributeValueMemberBOOL{Value: true}
			}
		} else {
			item["dk"], item["du"] = str(s.streamDueKey(pk)), num(j.LeaseExp)
		}
		header = types.TransactWriteItem{Put: &types.Put{
			TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	} else {
		update := "SET sq = :to, fn = :next, du = :du"
		values := map[string]types.AttributeValue{
			":from": num(f.From), ":to": num(f.Seq), ":n": num(f.N), ":next": num(f.N + 1),
		}
		if ended {
			// Off the due index: an ended stream is never interrupted.
			update = "SET sq = :to, fn = :next, ended = :t REMOVE dk, du"
			values[":t"] = &types.AttributeValueMemberBOOL{Value: true}
			if interrupted {
				update = "SET sq = :to, fn = :next, ended = :t, ei = :t REMOVE dk, du"
			}
		} else {
			values[":du"] = num(j.LeaseExp)
		}
		header = types.TransactWriteItem{Update: &types.Update{
			TableName:                 &s.table,
			Key:                       key(pk, skStreamHeader),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String("fn = :n AND sq = :from AND attribute_not_exists(ended) AND attribute_not_exists(intr)"),
			ExpressionAttributeValues: values,
		}}
	}
	frame := types.TransactWriteItem{Put: &types.Put{
		TableName: &s.table,
		Item: map[string]types.AttributeValue{
			"pk": str(pk), "sk": str(frameSK(f.Seq, f.N)), "fn": num(f.N), "fr": num(f.From),
			"sq": num(f.Seq), "kind": str(f.Kind), "ct": str(f.CT), "ttl": num(j.TTL),
		},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}
	_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems:      []types.TransactWriteItem{check, header, frame},
		ClientRequestToken: aws.String(requestToken(pk, f)),
	})
	return err
}

// StreamOf implements store.StreamLog.
func (s *Store) StreamOf(ctx context.Context, siteID, jobID string) (store.StreamRef, bool, error) {
	j, ok, err := s.readJob(ctx, jobPK(siteID, jobID))
	if err != nil {
		return store.StreamRef{}, false, fmt.Errorf("stream of: %w", err)
	}
	now := s.now()
	if !ok || !j.claimed() || j.Deadline <= now {
		return store.StreamRef{}, false, nil
	}
	state := store.State(j.State)
	return store.StreamRef{
		State:   state,
		LeaseID: j.Lease,
		Live:    (state == store.StateReady || state == store.StateRunning) && j.LeaseExp > now,
		Done:    state == store.StateDone && (j.Result != "" || j.ResultS3 != ""),
	}, true, nil
}

// defaultFramePage is ReadFrames' page when the caller names none.
const defaultFramePage = 256

// ReadFrames implements store.StreamLog: the header, then one strongly
// consistent Query of the frame range (frames are written before the
// header moves past them, in one transaction, so a header read first never
// promises a frame the Query cannot see).
func (s *Store) ReadFrames(ctx context.Context, siteID, jobID, leaseID string, from int64, max int) (store.StreamPage, error) {
	pk := streamPK(siteID, jobID, leaseID)
	hav, err := s.getRaw(ctx, pk, skStreamHeader)
	if err != nil {
		return store.StreamPage{}, fmt.Errorf("read frames: %w", err)
	}
	// Frames live no longer than their job: TTL deletes lazily, so a
	// header past its job's deadline is read as gone.
	if hav == nil || getN(hav, "dl") <= s.now() {
		return store.StreamPage{}, nil
	}
	if max <= 0 {
		max = defaultFramePage
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(pk), ":lo": str(frameSK(max64(from, 0), 0)), ":hi": str(frameKeyEnd),
		},
		ConsistentRead: aws.Bool(true),
		Limit:          aws.Int32(int32(max)),
	})
	if err != nil {
		return store.StreamPage{}, fmt.Errorf("read frames: %w", err)
	}
	page := store.StreamPage{Header: parseHeader(hav), More: len(out.LastEvaluatedKey) > 0}
	for _, av := range out.Items {
		page.Frames = append(page.Frames, parseFrame(av))
	}
	return page, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// dropStream deletes every item of a stream's partition (its header and
// frames), all of them even when one fails, and says whether any failed.
func (s *Store) dropStream(ctx context.Context, pk string) error {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ProjectionExpression:      aws.String("sk"),
		ConsistentRead:            aws.Bool(true),
	}
	var errs []error
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("read stream items: %w", err)
		}
		errs = append(errs, each(len(out.Items), func(i int) error {
			_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(pk, getS(out.Items[i], "sk"))})
			if err != nil {
				return fmt.Errorf("delete stream item: %w", err)
			}
			return nil
		}))
		if len(out.LastEvaluatedKey) == 0 {
			return errors.Join(errs...)
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// SweepStreams implements store.StreamLog from the due index.
func (s *Store) SweepStreams(ctx context.Context) (int, error) {
	now := s.now()
	marked := 0
	for shard := 0; shard < s.shards; shard++ {
		in := &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String("due"),
			KeyConditionExpression: aws.String("dk = :dk AND du <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":dk": str("S" + dueShardKey(shard)), ":now": num(now),
			},
		}
		for {
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return marked, fmt.Errorf("sweep streams: %w", err)
			}
			for _, av := range out.Items {
				m, err := s.sweepStream(ctx, getS(av, "pk"), now)
				if err != nil {
					return marked, err
				}
				if m {
					marked++
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
	return marked, nil
}

// sweepStream decides one due header: interrupted unless its lease is still
// live, in which case its due time moves to the renewed expiry. Both writes
// are conditioned on the counter read, so an append in between wins and
// the header is judged again at its next due time.
func (s *Store) sweepStream(ctx context.Context, pk string, now int64) (bool, error) {
	hav, err := s.getRaw(ctx, pk, skStreamHeader)
	if err != nil {
		return false, fmt.Errorf("sweep streams: %w", err)
	}
	h := parseHeader(hav)
	if h == nil || h.Ended || h.Interrupted {
		return false, nil
	}
	j, ok, err := s.readJob(ctx, jobPK(getS(hav, "site"), getS(hav, "jobId")))
	if err != nil {
		return false, fmt.Errorf("sweep streams: %w", err)
	}
	live := ok && j.Lease == getS(hav, "lease") && j.LeaseExp > now && j.Deadline > now &&
		(j.State == string(store.StateReady) || j.State == string(store.StateRunning))
	update := "SET intr = :t REMOVE dk, du"
	values := map[string]types.AttributeValue{":n": num(h.N), ":t": &types.AttributeValueMemberBOOL{Value: true}}
	if live {
		update = "SET du = :du"
		values = map[string]types.AttributeValue{":n": num(h.N), ":du": num(j.LeaseExp)}
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       key(pk, skStreamHeader),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("fn = :n AND attribute_not_exists(ended) AND attribute_not_exists(intr)"),
		ExpressionAttributeValues: values,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweep streams: %w", err)
	}
	return !live, nil
}
