// Package objects keeps objects in one S3 bucket with one signed REST call
// each (PUT, GET, DELETE of /{key}), not the SDK's s3 client: the relay
// stores only the rare envelope too large to inline there, and the s3
// package's initialisation and size were paid by every relay function at
// every cold start, offloading or not. The call is lambdafn/awscall's.
//
// It addresses the bucket as the SDK's client does: virtual-hosted
// ({bucket}.{endpoint's host}) by default, by path ({endpoint}/{bucket})
// when asked (S3_PATH_STYLE, for local stand-ins whose bucket host names
// do not resolve), and by path whatever was asked when the bucket's name
// cannot be a host label or the endpoint is an IP address.
package objects

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/lambdafn/awscall"
)

// ErrNotFound is Get's error, wrapped, when no object has the key.
var ErrNotFound = errors.New("objects: no such key")

// Bucket is one bucket's objects.
type Bucket struct {
	call *awscall.Client
	// prefix is "/{bucket}" when the bucket is addressed by path, "" when
	// it is in the host name.
	prefix string
}

// New is the bucket named bucket, in cfg's region with cfg's credentials.
// endpoint overrides the regional S3 endpoint (AWS_ENDPOINT_URL_S3); ""
// takes cfg.BaseEndpoint, and without that the region's public endpoint.
// pathStyle addresses the bucket by path rather than by host name.
func New(cfg aws.Config, endpoint, bucket string, pathStyle bool) *Bucket {
	base, prefix := address(awscall.Endpoint(cfg, "s3", endpoint), bucket, pathStyle)
	return &Bucket{call: awscall.New(cfg, "s3", base), prefix: prefix}
}

// address is the URL a bucket's requests go to and the path its keys
// follow: the SDK's rules, for the cases a deployment or a local stand-in
// meets.
func address(endpoint, bucket string, pathStyle bool) (base, prefix string) {
	u, err := url.Parse(endpoint)
	if pathStyle || err != nil || u.Host == "" || !hostLabel(bucket) || net.ParseIP(u.Hostname()) != nil {
		return endpoint, "/" + escape(bucket)
	}
	u.Host = bucket + "." + u.Host
	return u.String(), ""
}

// hostLabel reports a bucket name that can lead a host name as it is:
// lower-case letters, digits and hyphens, 3 to 63 long, no hyphen at either
// end. A name with dots would not match the endpoint's TLS certificate.
func hostLabel(bucket string) bool {
	if len(bucket) < 3 || len(bucket) > 63 || bucket[0] == '-' || bucket[len(bucket)-1] == '-' {
		return false
	}
	for _, c := range []byte(bucket) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// escape percent-encodes s as SigV4 encodes a path for S3: every byte but
// the unreserved characters and '/'. The request is signed with its path
// as sent, so what is sent must already be the canonical form.
func escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// path is the request path of key's object.
func (b *Bucket) path(key string) string { return b.prefix + "/" + escape(key) }

// attempts is how many times a call is made while S3 answers 500 or 503
// or the connection fails: S3 asks its callers to retry those, and the
// SDK's client did, three times. Every call here is idempotent (a PUT
// writes the same bytes under a key of its own).
const attempts = 3

// do makes the call, again after a pause while it may succeed next time.
func (b *Bucket) do(ctx context.Context, method, key string, body []byte, maxReply int64) (awscall.Reply, error) {
	var reply awscall.Reply
	var err error
	for i := range attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return awscall.Reply{}, ctx.Err()
			case <-time.After(time.Duration(50<<i) * time.Millisecond): // 100 ms, 200 ms
			}
		}
		reply, err = b.call.Do(ctx, method, b.path(key), nil, body, maxReply)
		if err == nil && reply.StatusCode != http.StatusInternalServerError && reply.StatusCode != http.StatusServiceUnavailable {
			return reply, nil
		}
	}
	return reply, err
}

// maxErrorReply bounds what is read of a refusal: S3's error documents are
// a few hundred bytes.
const maxErrorReply = 64 << 10

// Put writes body as key's object, replacing any object there.
func (b *Bucket) Put(ctx context.Context, key string, body []byte) error {
	reply, err := b.do(ctx, http.MethodPut, key, body, maxErrorReply)
	if err != nil {
		return fmt.Errorf("objects: PUT %s: %w", key, err)
	}
	if reply.StatusCode != http.StatusOK {
		return refusal("PUT", key, reply)
	}
	return nil
}

// Get reads key's object, which may be at most limit bytes long: a longer
// one is an error, not a truncated read. A missing object is an error
// wrapping ErrNotFound.
func (b *Bucket) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	// One byte past limit tells a longer object from one just that long; a
	// refusal is read whole, however small limit is.
	reply, err := b.do(ctx, http.MethodGet, key, nil, max(limit, maxErrorReply)+1)
	if err != nil {
		return nil, fmt.Errorf("objects: GET %s: %w", key, err)
	}
	if reply.StatusCode != http.StatusOK {
		return nil, refusal("GET", key, reply)
	}
	if int64(len(reply.Body)) > limit {
		return nil, fmt.Errorf("objects: GET %s: object longer than %d bytes", key, limit)
	}
	return reply.Body, nil
}

// Delete removes key's object. S3 answers a key with no object as it
// answers a deleted one: that is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	reply, err := b.do(ctx, http.MethodDelete, key, nil, maxErrorReply)
	if err != nil {
		return fmt.Errorf("objects: DELETE %s: %w", key, err)
	}
	if reply.StatusCode != http.StatusNoContent && reply.StatusCode != http.StatusOK {
		return refusal("DELETE", key, reply)
	}
	return nil
}

// refusal is the error for an answer with an error status, with S3's
// error code and message when the answer carries them (an XML document,
// read here without an XML decoder: two elements are all it needs).
func refusal(method, key string, reply awscall.Reply) error {
	body := string(reply.Body)
	code, message := element(body, "Code"), element(body, "Message")
	if reply.StatusCode == http.StatusNotFound && code == "NoSuchKey" {
		return fmt.Errorf("objects: %s %s: %w (%s)", method, key, ErrNotFound, message)
	}
	return fmt.Errorf("objects: %s %s: %s %s: %s", method, key, reply.Status, code, message)
}

// element is the text of the first <name> element of an XML document, or
// "" (entities left as they are: it is only ever shown).
func element(doc, name string) string {
	_, rest, ok := strings.Cut(doc, "<"+name+">")
	if !ok {
		return ""
	}
	text, _, _ := strings.Cut(rest, "</"+name+">")
	return text
}
