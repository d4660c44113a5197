package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// storedEnvelope is an envelope ready to go into a job item: inline JSON,
// the sort key of its own item under the job's partition key, or the key of
// the S3 object; the item and the object are already written.
type storedEnvelope struct {
	inline string
	// inlineC is the inline envelope's ciphertext as bytes, when it packs
	// (compact.go).
	inlineC []byte
	item    string
	s3Key   string
}

// empty reports an envelope not stored yet.
func (e storedEnvelope) empty() bool { return e.inline == "" && e.item == "" && e.s3Key == "" }

// skPayloadPrefix begins the sort key of a payload's own item. Each seal
// writes a fresh one (the prefix and a random id): two seals racing for one
// grant each write their own, and the job names the one whose write won.
const skPayloadPrefix = "EP#"

// envelopeAttr holds an envelope item's JSON, and envelopeBytesAttr its
// ciphertext as bytes when it packs (compact.go).
const (
	envelopeAttr      = "env"
	envelopeBytesAttr = "envC"
)

// putEnvelope encodes e and, when it is larger than the inline limit,
// writes it to S3 first, so the item never points at an object that does
// not exist, and names it in the job's end hook before that (noteEnd). If
// the job write that follows loses its condition, the caller deletes the
// object again (dropObjects); what a crash leaves behind the end sweep
// deletes through the hook, at the job's end.
//
// A small payload goes to an item of its own rather than inline: every
// write of the job after the seal (the fetch, each lease renewal, the
// result, the removal) is billed on the whole job item, so an inline
// payload would be paid for on each of them; in its own item it is written
// once. A small result stays inline: the result's write is the job's last
// but its removal, so moving it out would save nothing and cost every
// results listing a second read.
func (s *Store) putEnvelope(ctx context.Context, j *jobItem, direction string, e protocol.SealedEnvelope) (storedEnvelope, error) {
	pk, leaseID := j.PK, j.Lease
	body, err := json.Marshal(e)
	if err != nil {
		return storedEnvelope{}, fmt.Errorf("encode envelope: %w", err)
	}
	if len(body) <= s.inlineBytes {
		packed, raw, err := packEnvelope(e)
		if err != nil {
			return storedEnvelope{}, err
		}
		if direction != "payload" {
			return storedEnvelope{inline: packed, inlineC: raw}, nil
		}
		sk := skPayloadPrefix + newWID()
		item := map[string]types.AttributeValue{
			"pk": str(pk), "sk": str(sk), envelopeAttr: str(packed),
			// The item is its job's end hook (endJob): due when the job's
			// deadline and the result grace are over, when the sweep
			// deletes it with the job's other ciphertext. TTL is only the
			// backstop: it deletes days late.
			"dl": num(j.Deadline), "dk": str(endDueKey(pk, s.shards)), "du": num(endAt(j.Deadline)),
			"ttl": num(j.Deadline/1000 + ttlGraceSeconds),
		}
		if raw != nil {
			item[envelopeBytesAttr] = &types.AttributeValueMemberB{Value: raw}
		}
		if err := s.putOnce(ctx, item); err != nil {
			return storedEnvelope{}, fmt.Errorf("put envelope item: %w", err)
		}
		return storedEnvelope{item: sk}, nil
	}
	if s.objects == nil {
		return storedEnvelope{}, ErrNoBucket
	}
	sum := sha256.Sum256([]byte(pk))
	k := "env/" + hex.EncodeToString(sum[:12]) + "/" + leaseID + "/" + direction + "-" + newWID()
	// Named by the job's end hook before it exists, so no object is ever
	// written that the end sweep would not delete.
	if err := s.noteEnd(ctx, j, endObjects, k); err != nil {
		return storedEnvelope{}, err
	}
	if err := s.objects.Put(ctx, k, body); err != nil {
		return storedEnvelope{}, fmt.Errorf("put envelope object: %w", err)
	}
	return storedEnvelope{s3Key: k}, nil
}

// errEnvelopeGone is a job's envelope item or object that is no longer
// there. Every write that deletes one (a requeue, the sweep's removal, a
// job's end) first changes or removes the job item that names it, so the job read
// that led here is stale: the caller reads the job again and decides on
// what it is now, instead of failing a request over a race with a sweep.
var errEnvelopeGone = errors.New("envelope item is gone")

// loadEnvelopes fetches the job's envelopes held outside its item into it.
func (s *Store) loadEnvelopes(ctx context.Context, j *jobItem) error {
	var err error
	if j.PayloadItem != "" && j.payload == nil {
		if j.payload, err = s.envelopeItem(ctx, j.PK, j.PayloadItem); err != nil {
			return err
		}
	}
	if j.PayloadS3 != "" && j.payload == nil {
		if j.payload, err = s.objectOf(ctx, j, j.PayloadS3); err != nil {
			return err
		}
	}
	if j.ResultS3 != "" && j.result == nil {
		if j.result, err = s.objectOf(ctx, j, j.ResultS3); err != nil {
			return err
		}
	}
	return nil
}

// objectOf fetches an envelope object the job item j names. An object is
// deleted only after the write that dropped its reference committed, so a
// fetch that fails while the job has changed since j was read is
// errEnvelopeGone, and the caller reads the job again. While the job still
// names it, a missing object is missing from under its job: an error that
// says so, never a job without its envelope.
func (s *Store) objectOf(ctx context.Context, j *jobItem, k string) (*protocol.SealedEnvelope, error) {
	e, err := s.getEnvelope(ctx, k)
	if err == nil {
		return e, nil
	}
	now, ok, rerr := s.readJob(ctx, j.PK)
	if rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	if !ok || now.Ver != j.Ver {
		return nil, fmt.Errorf("%w: %w", errEnvelopeGone, err)
	}
	return nil, err
}

// envelopeItem reads an envelope's own item. It is written once, before the
// job write that names it, and never changed: an eventually consistent read
// finds it unless it is very fresh, and only then is it read again
// strongly.
func (s *Store) envelopeItem(ctx context.Context, pk, sk string) (*protocol.SealedEnvelope, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(pk, sk)})
	if err != nil {
		return nil, fmt.Errorf("get envelope item: %w", err)
	}
	av := out.Item
	if len(av) == 0 {
		if av, err = s.getRaw(ctx, pk, sk); err != nil {
			return nil, fmt.Errorf("get envelope item: %w", err)
		}
	}
	body := getS(av, envelopeAttr)
	if body == "" {
		return nil, fmt.Errorf("envelope item %q of %q: %w", sk, pk, errEnvelopeGone)
	}
	var raw []byte
	if b, ok := av[envelopeBytesAttr].(*types.AttributeValueMemberB); ok {
		raw = b.Value
	}
	return unpackEnvelope(body, raw)
}

// maxEnvelopeObject bounds what an envelope object read may be: the
// protocol's envelopes are at most 6 MiB of JSON (MAX_ENVELOPE_BYTES), and
// the store writes nothing longer.
const maxEnvelopeObject = 8 << 20

func (s *Store) getEnvelope(ctx context.Context, k string) (*protocol.SealedEnvelope, error) {
	if s.objects == nil {
		return nil, ErrNoBucket
	}
	body, err := s.objects.Get(ctx, k, maxEnvelopeObject)
	if err != nil {
		return nil, fmt.Errorf("get envelope object: %w", err)
	}
	var e protocol.SealedEnvelope
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("decode envelope object: %w", err)
	}
	return &e, nil
}

// dropObjects deletes envelope objects a job no longer refers to. Called
// only after the write that dropped the reference committed. A failure is
// not reported to the caller, whose routing decision already stands: the
// job's end hook names every object (noteEnd), so the end sweep deletes it
// again, and the bucket's lifecycle rule is the last backstop.
func (s *Store) dropObjects(ctx context.Context, keys ...string) {
	_ = s.deleteObjects(ctx, keys...)
}

// deleteObjects deletes envelope objects, every one even when one fails,
// and says whether any failed. A missing object is not a failure. Each
// failure is reported to Config.OnObjectDeleteFailed: every delete of an
// object, on a request or in a sweep, comes through here.
func (s *Store) deleteObjects(ctx context.Context, keys ...string) error {
	var errs []error
	for _, k := range keys {
		if k == "" || s.objects == nil {
			continue
		}
		if err := s.objects.Delete(ctx, k); err != nil {
			err = fmt.Errorf("delete envelope object: %w", err)
			if s.onDeleteFailed != nil {
				s.onDeleteFailed(err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropPayloadItem deletes the payload item of a grant that was requeued (it
// was sealed to a device that no longer holds the job) or of a job a sweep
// removed. Called only after the write that dropped the reference
// committed; a failure is not reported: the item is its own end hook on
// the due index, so the end sweep deletes it at the job's end (endJob).
func (s *Store) dropPayloadItem(ctx context.Context, j *jobItem) {
	if j.PayloadItem == "" {
		return
	}
	_, _ = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(j.PK, j.PayloadItem)})
}

// endAt is when a job's ciphertext must be gone: its deadline, plus the
// grace a collect lists a result for (store.ResultGraceMs). Past it no read
// can return anything of the job.
func endAt(deadline int64) int64 { return deadline + store.ResultGraceMs }

// The sets of an end item: the S3 objects the job wrote (endObjects) and
// the partitions of the frame logs its grants streamed (endStreams).
const (
	endObjects = "s3"
	endStreams = "st"
)

// noteEnd writes or extends the job's end hook (skEnd): on the due index at
// endAt of the job's deadline, naming member (if any) in set, the objects
// or the streams the end sweep deletes. It is written before whatever it
// is for (the object, the stream's first frame, or the job write that
// holds a result with no payload item to be its hook), so nothing outlives
// the job unnamed. A hook is only ever moved later: a stale writer (a
// replica's write for an older job with this key) cannot bring it forward
// onto a newer job's objects.
func (s *Store) noteEnd(ctx context.Context, j *jobItem, set, member string) error {
	values := map[string]types.AttributeValue{
		":dk": str(endDueKey(j.PK, s.shards)), ":du": num(endAt(j.Deadline)), ":dl": num(j.Deadline),
		":ttl": num(j.Deadline/1000 + ttlGraceSeconds),
	}
	update := "SET dk = :dk, du = :du, dl = :dl, #ttl = :ttl"
	if member != "" {
		update += " ADD " + set + " :k"
		values[":k"] = strSet(member)
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(j.PK, skEnd),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("attribute_not_exists(du) OR du <= :du"),
		ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: values,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		// The hook is already due later: only add the member to it.
		if member == "" {
			return nil
		}
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: key(j.PK, skEnd),
			UpdateExpression:          aws.String("ADD " + set + " :k"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": strSet(member)},
		})
	}
	if err != nil {
		return fmt.Errorf("write end hook: %w", err)
	}
	return nil
}
