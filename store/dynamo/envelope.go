package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/protocol"
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
// not exist. If the job write that follows loses its condition, the caller
// deletes the object again (dropObject); the bucket's lifecycle rule
// collects anything a crash leaves behind.
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
			// Collected with its job's item, at the latest.
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
	if err := s.objects.Put(ctx, k, body); err != nil {
		return storedEnvelope{}, fmt.Errorf("put envelope object: %w", err)
	}
	return storedEnvelope{s3Key: k}, nil
}

// loadEnvelopes fetches the job's envelopes held outside its item into it.
func (s *Store) loadEnvelopes(ctx context.Context, j *jobItem) error {
	var err error
	if j.PayloadItem != "" && j.payload == nil {
		if j.payload, err = s.envelopeItem(ctx, j.PK, j.PayloadItem); err != nil {
			return err
		}
	}
	if j.PayloadS3 != "" && j.payload == nil {
		if j.payload, err = s.getEnvelope(ctx, j.PayloadS3); err != nil {
			return err
		}
	}
	if j.ResultS3 != "" && j.result == nil {
		if j.result, err = s.getEnvelope(ctx, j.ResultS3); err != nil {
			return err
		}
	}
	return nil
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
		return nil, fmt.Errorf("envelope item %q of %q is missing", sk, pk)
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
// not reported: the lifecycle rule is the backstop, and the routing
// decision already stands.
func (s *Store) dropObjects(ctx context.Context, keys ...string) {
	for _, k := range keys {
		if k == "" || s.objects == nil {
			continue
		}
		_ = s.objects.Delete(ctx, k)
	}
}

// dropPayloadItem deletes the payload item of a grant that was requeued: it
// was sealed to a device that no longer holds the job. Called only after the
// write that dropped the reference committed; a failure is not reported,
// TTL collects the item with its job. A removed job's payload item is left
// to TTL too: nothing can reach it once the job is gone.
func (s *Store) dropPayloadItem(ctx context.Context, j *jobItem) {
	if j.PayloadItem == "" {
		return
	}
	_, _ = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(j.PK, j.PayloadItem)})
}
