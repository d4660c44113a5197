package objects

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/localtest"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// newBucket creates a bucket on moto and answers it as a Bucket, by path.
func newBucket(t *testing.T) (*Bucket, string) {
	t.Helper()
	name := strings.ToLower(localtest.UniqueName("objects"))
	if _, err := localtest.S3Client(t).CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	return New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", name, true), name
}

// Put, Get and Delete reach moto's S3, and what the SDK's client reads is
// what was put, under a key with characters the path must escape.
func TestObjectsRoundTripThroughS3(t *testing.T) {
	ctx := context.Background()
	b, name := newBucket(t)
	key, body := "env/0a1b/lease+1 x=y/payload-é~.json", []byte(`{"ciphertext":"x"}`)
	if err := b.Put(ctx, key, body); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, key, int64(len(body)))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("get: %q %v", got, err)
	}
	out, err := localtest.S3Client(t).GetObject(ctx, &s3.GetObjectInput{Bucket: &name, Key: &key})
	if err != nil {
		t.Fatalf("the SDK's client does not find the key as put: %v", err)
	}
	sdkGot, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(sdkGot, body) {
		t.Fatalf("the SDK's client read %q", sdkGot)
	}

	if _, err := b.Get(ctx, key, int64(len(body))-1); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an object past the bound was read: %v", err)
	}
	if err := b.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, key, 1<<20); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := b.Delete(ctx, key); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
}

// A bucket that does not exist is an error for every call, and not one a
// caller could take for a missing key.
func TestAMissingBucketIsAnErrorOfItsOwn(t *testing.T) {
	ctx := context.Background()
	b := New(localtest.AWSConfig(localtest.MotoEndpoint(t)), "", strings.ToLower(localtest.UniqueName("absent")), true)
	if err := b.Put(ctx, "k", []byte("x")); err == nil || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Fatalf("put: %v", err)
	}
	if _, err := b.Get(ctx, "k", 10); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Fatalf("get: %v", err)
	}
	if err := b.Delete(ctx, "k"); err == nil || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Fatalf("delete: %v", err)
	}
}

// sent records the URL of each request a client sends and answers it 200
// with no body, as S3 answers a PutObject: the addressing test needs no
// service, only what the client would have sent.
type sent struct{ urls []string }

func (s *sent) Do(r *http.Request) (*http.Response, error) {
	s.urls = append(s.urls, r.URL.Scheme+"://"+r.URL.Host+r.URL.EscapedPath())
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// The bucket is addressed as the SDK's rules address it: in the host name
// unless asked for by path, and by path whatever was asked when the name
// cannot lead a host name or the endpoint is an IP address. The key is in
// the path, escaped.
func TestAddressing(t *testing.T) {
	for _, c := range []struct {
		region, endpoint, bucket string
		pathStyle                bool
		want                     string
	}{
		{"us-east-1", "", "envelopes", false, "https://envelopes.s3.us-east-1.amazonaws.com/env/a%2Bb%20c/%C3%A9"},
		{"eu-west-1", "", "envelopes", true, "https://s3.eu-west-1.amazonaws.com/envelopes/env/a%2Bb%20c/%C3%A9"},
		{"cn-north-1", "", "envelopes", false, "https://envelopes.s3.cn-north-1.amazonaws.com.cn/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "http://localhost:4566", "envelopes", false, "http://envelopes.localhost:4566/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "http://localhost:4566", "envelopes", true, "http://localhost:4566/envelopes/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "https://proxy.example/s3", "envelopes", false, "https://envelopes.proxy.example/s3/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "http://127.0.0.1:5000", "envelopes", false, "http://127.0.0.1:5000/envelopes/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "", "my.envelopes", false, "https://s3.us-east-1.amazonaws.com/my.envelopes/env/a%2Bb%20c/%C3%A9"},
		{"us-east-1", "", "Envelopes", false, "https://s3.us-east-1.amazonaws.com/Envelopes/env/a%2Bb%20c/%C3%A9"},
	} {
		rec := &sent{}
		cfg := localtest.AWSConfig("")
		cfg.BaseEndpoint, cfg.Region, cfg.HTTPClient = nil, c.region, rec
		if err := New(cfg, c.endpoint, c.bucket, c.pathStyle).Put(context.Background(), "env/a+b c/é", []byte("x")); err != nil {
			t.Errorf("%s %q %s: %v", c.region, c.endpoint, c.bucket, err)
			continue
		}
		if len(rec.urls) != 1 || rec.urls[0] != c.want {
			t.Errorf("%s %q %s path-style %v: sent to %q, want %s", c.region, c.endpoint, c.bucket, c.pathStyle, rec.urls, c.want)
		}
	}
}

// A 503 (S3's SlowDown) is tried again, by the SDK's retryer as the
// client is built; three of them are the call's error, with S3's code. A
// stand-in server, because moto never slows down.
func TestSlowDownIsTriedAgain(t *testing.T) {
	var calls, failFirst atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if calls.Add(1) <= failFirst.Load() {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	b := New(localtest.AWSConfig(""), srv.URL, "envelopes", true)

	failFirst.Store(2)
	if err := b.Put(context.Background(), "k", []byte("x")); err != nil || calls.Load() != 3 {
		t.Fatalf("put after two SlowDowns: %v after %d calls, want success on the third", err, calls.Load())
	}
	calls.Store(0)
	failFirst.Store(3)
	if err := b.Put(context.Background(), "k", []byte("x")); err == nil || !strings.Contains(err.Error(), "SlowDown") || calls.Load() != 3 {
		t.Fatalf("put after three SlowDowns: %v after %d calls, want SlowDown after three", err, calls.Load())
	}
}
