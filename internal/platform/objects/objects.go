// Package objects keeps objects in one S3 bucket with the SDK's s3 client
// (PutObject, GetObject, DeleteObject of a key): the envelopes too large
// to inline in a DynamoDB item, behind store/dynamo's Objects interface.
// The client is built by the first call, not by New: most containers never
// offload an envelope, and a function's init builds no client it may not
// call.
//
// The bucket is addressed by the SDK's rules: virtual-hosted
// ({bucket}.{endpoint's host}) by default, by path ({endpoint}/{bucket})
// when asked (S3_PATH_STYLE, for local stand-ins whose bucket host names do
// not resolve), and by path whatever was asked when the bucket's name
// cannot be a host label or the endpoint is an IP address.
package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ErrNotFound is Get's error, wrapped, when no object has the key. A
// missing bucket is an error of its own: the store must not take a
// misconfigured deployment for an envelope that is gone.
var ErrNotFound = errors.New("objects: no such key")

// Bucket is one bucket's objects.
type Bucket struct {
	api    func() *s3.Client
	bucket string
}

// New is the bucket named bucket, in cfg's region with cfg's credentials.
// endpoint overrides the regional S3 endpoint (AWS_ENDPOINT_URL_S3); ""
// takes cfg.BaseEndpoint, and without that the region's public endpoint.
// pathStyle addresses the bucket by path rather than by host name.
func New(cfg aws.Config, endpoint, bucket string, pathStyle bool) *Bucket {
	return &Bucket{bucket: bucket, api: sync.OnceValue(func() *s3.Client {
		return s3.NewFromConfig(cfg, func(o *s3.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
			o.UsePathStyle = pathStyle
		})
	})}
}

// Put writes body as key's object, replacing any object there.
func (b *Bucket) Put(ctx context.Context, key string, body []byte) error {
	_, err := b.api().PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		return fmt.Errorf("objects: put %s: %w", key, err)
	}
	return nil
}

// Get reads key's object, which may be at most limit bytes long: a longer
// one is an error, not a truncated read. A missing object is an error
// wrapping ErrNotFound.
func (b *Bucket) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	out, err := b.api().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil {
		if _, ok := errors.AsType[*types.NoSuchKey](err); ok {
			return nil, fmt.Errorf("objects: get %s: %w (%w)", key, ErrNotFound, err)
		}
		return nil, fmt.Errorf("objects: get %s: %w", key, err)
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > limit {
		return nil, fmt.Errorf("objects: get %s: object of %d bytes, longer than %d", key, n, limit)
	}
	// One byte past limit tells a longer object from one just that long,
	// whatever the length the answer declared.
	body, err := io.ReadAll(io.LimitReader(out.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("objects: get %s: %w", key, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("objects: get %s: object longer than %d bytes", key, limit)
	}
	return body, nil
}

// Delete removes key's object. S3 answers a key with no object as it
// answers a deleted one: that is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if _, err := b.api().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)}); err != nil {
		return fmt.Errorf("objects: delete %s: %w", key, err)
	}
	return nil
}
