package dynamo

import "context"

// Objects is the envelope bucket: where the store keeps envelopes too
// large to inline, one object per key. It names no SDK type, so this
// package links no S3 client: the relay's functions get theirs from
// internal/platform/objects, which implements it with the SDK's s3 client, and a
// program that never offloads (the site stack, the memory-backed tests)
// links none.
type Objects interface {
	// Put writes body as key's object.
	Put(ctx context.Context, key string, body []byte) error
	// Get reads key's object, at most max bytes long: a missing or longer
	// object is an error.
	Get(ctx context.Context, key string, max int64) ([]byte, error)
	// Delete removes key's object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
}
