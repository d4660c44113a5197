package dynamo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// Objects is the envelope bucket: where the store keeps an at-rest
// envelope too large to inline in an item (over MaxEnvelopeItemBytes), one
// object per key, as the relay's store does. It names no SDK type, so this
// package links no S3 client: the site functions get theirs from
// internal/platform/objects, and a store without one refuses such an
// envelope (ErrTooLarge).
type Objects interface {
	// Put writes body as key's object.
	Put(ctx context.Context, key string, body []byte) error
	// Get reads key's object, at most max bytes long: a missing or longer
	// object is an error.
	Get(ctx context.Context, key string, max int64) ([]byte, error)
	// Delete removes key's object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
}

// maxObjectBytes bounds an offloaded envelope as stored (its JSON): the
// protocol's ceiling on an envelope, with room for the outer fields.
const maxObjectBytes = protocol.MaxEnvelopeBytes + 64*1024

// objectKey is a fresh key for job id's envelope: unique per create, so
// that two racing creates of one id never write one object and the loser
// deletes only its own.
func objectKey(id string) string { return "site-env/" + id + "/" + sitestore.NewID() }

// offload puts env in the bucket and answers its key.
func (s *Store) offload(ctx context.Context, id string, env protocol.SealedEnvelope) (string, error) {
	body, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	if len(body) > maxObjectBytes {
		return "", ErrTooLarge
	}
	k := objectKey(id)
	if err := s.objects.Put(ctx, k, body); err != nil {
		return "", fmt.Errorf("offload envelope of job %s: %w", id, err)
	}
	return k, nil
}

// fetchObject reads an offloaded envelope back.
func (s *Store) fetchObject(ctx context.Context, k string) (protocol.SealedEnvelope, error) {
	if s.objects == nil {
		return protocol.SealedEnvelope{}, fmt.Errorf("envelope object %s: this store has no bucket (Config.Objects)", k)
	}
	body, err := s.objects.Get(ctx, k, maxObjectBytes)
	if err != nil {
		return protocol.SealedEnvelope{}, err
	}
	var env protocol.SealedEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return protocol.SealedEnvelope{}, fmt.Errorf("envelope object %s: %w", k, err)
	}
	return env, nil
}

// dropObject deletes an offloaded envelope; a failure is counted and
// reported (Config.OnObjectDeleteFailed), and the bucket's lifecycle rule
// is the backstop.
func (s *Store) dropObject(ctx context.Context, k string) {
	if k == "" || s.objects == nil {
		return
	}
	if err := s.objects.Delete(ctx, k); err != nil {
		s.objectDeleteFailures.Add(1)
		if s.onObjectDeleteFailed != nil {
			s.onObjectDeleteFailed(err)
		}
	}
}

// ObjectDeleteFailures is how many envelope object deletes this store has
// seen fail.
func (s *Store) ObjectDeleteFailures() int64 { return s.objectDeleteFailures.Load() }

// objectOf is the object key an envelope item names, "" if it names none.
func objectOf(item map[string]types.AttributeValue) string {
	if v, ok := item["obj"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}
