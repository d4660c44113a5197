package dynamo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/protocol"
)

// storedEnvelope is an envelope ready to go into a job item: inline JSON, or
// the key of the S3 object already written.
type storedEnvelope struct {
	inline string
	s3Key  string
}

// putEnvelope encodes e and, when it is larger than the inline limit,
// writes it to S3 first, so the item never points at an object that does
// not exist. If the job write that follows loses its condition, the caller
// deletes the object again (dropObject); the bucket's lifecycle rule
// collects anything a crash leaves behind.
func (s *Store) putEnvelope(ctx context.Context, pk, leaseID, direction string, e protocol.SealedEnvelope) (storedEnvelope, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return storedEnvelope{}, fmt.Errorf("encode envelope: %w", err)
	}
	if len(body) <= s.inlineBytes {
		return storedEnvelope{inline: string(body)}, nil
	}
	if s.s3 == nil || s.bucket == "" {
		return storedEnvelope{}, ErrNoBucket
	}
	sum := sha256.Sum256([]byte(pk))
	k := "env/" + hex.EncodeToString(sum[:12]) + "/" + leaseID + "/" + direction + "-" + newWID()
	_, err = s.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &k, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json"),
	})
	if err != nil {
		return storedEnvelope{}, fmt.Errorf("put envelope object: %w", err)
	}
	return storedEnvelope{s3Key: k}, nil
}

// loadEnvelopes fetches the job's S3-held envelopes into it.
func (s *Store) loadEnvelopes(ctx context.Context, j *jobItem) error {
	var err error
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

func (s *Store) getEnvelope(ctx context.Context, k string) (*protocol.SealedEnvelope, error) {
	if s.s3 == nil {
		return nil, ErrNoBucket
	}
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return nil, fmt.Errorf("get envelope object: %w", err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(io.LimitReader(out.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("read envelope object: %w", err)
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
		if k == "" || s.s3 == nil {
			continue
		}
		_, _ = s.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(k)})
	}
}
