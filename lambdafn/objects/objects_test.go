package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/lambdafn/awscall"
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

// The bucket is addressed as the SDK's client addresses it: in the host
// name unless asked for by path, and by path whatever was asked when the
// name cannot lead a host name or the endpoint is an IP address.
func TestAddressing(t *testing.T) {
	// The regional endpoint New takes without an override.
	region := func(r string) string { return awscall.Endpoint(aws.Config{Region: r}, "s3", "") }
	for _, c := range []struct {
		endpoint, bucket string
		pathStyle        bool
		base, prefix     string
	}{
		{region("us-east-1"), "envelopes", false, "https://envelopes.s3.us-east-1.amazonaws.com", ""},
		{region("eu-west-1"), "envelopes", true, "https://s3.eu-west-1.amazonaws.com", "/envelopes"},
		{region("cn-north-1"), "envelopes", false, "https://envelopes.s3.cn-north-1.amazonaws.com.cn", ""},
		{"http://localhost:4566", "envelopes", false, "http://envelopes.localhost:4566", ""},
		{"http://localhost:4566", "envelopes", true, "http://localhost:4566", "/envelopes"},
		{"https://proxy.example/s3", "envelopes", false, "https://envelopes.proxy.example/s3", ""},
		{"http://127.0.0.1:5000", "envelopes", false, "http://127.0.0.1:5000", "/envelopes"},
		{region("us-east-1"), "my.envelopes", false, "https://s3.us-east-1.amazonaws.com", "/my.envelopes"},
		{region("us-east-1"), "Envelopes", false, "https://s3.us-east-1.amazonaws.com", "/Envelopes"},
	} {
		base, prefix := address(c.endpoint, c.bucket, c.pathStyle)
		if base != c.base || prefix != c.prefix {
			t.Errorf("address(%q, %q, %v) = %q %q, want %q %q", c.endpoint, c.bucket, c.pathStyle, base, prefix, c.base, c.prefix)
		}
	}
}

// A 503 (S3's SlowDown) or a 500 is tried again, as the SDK's client did;
// three of them are the call's error, with S3's code.
func TestSlowDownIsTriedAgain(t *testing.T) {
	var calls, failFirst atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= failFirst.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
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

// A request is signed as S3 checks it: the payload's hash in
// X-Amz-Content-Sha256 and among the signed headers, and the path signed
// as sent (escaped once). The stand-in server recomputes the signature from
// what arrived, by S3's rules, as S3 does; moto checks no signature.
func TestRequestsAreSignedAsS3ChecksThem(t *testing.T) {
	cfg := localtest.AWSConfig("")
	creds, err := cfg.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	problems := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problems <- checkSignature(r, creds)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	b := New(cfg, srv.URL, "envelopes", true)
	if err := b.Put(context.Background(), "env/a+b c/é", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if p := <-problems; p != "" {
		t.Fatal("put: " + p)
	}
	if _, err := b.Get(context.Background(), "env/a+b c/é", 10); err != nil {
		t.Fatal(err)
	}
	if p := <-problems; p != "" {
		t.Fatal("get: " + p)
	}
}

// checkSignature recomputes r's signature from the headers it says it
// signed and its path as received; "" when it matches.
func checkSignature(r *http.Request, creds aws.Credentials) string {
	body, _ := io.ReadAll(r.Body)
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if got := r.Header.Get("X-Amz-Content-Sha256"); got != hash {
		return "X-Amz-Content-Sha256 is " + got + ", the body's hash " + hash
	}
	auth := r.Header.Get("Authorization")
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	if !strings.Contains(";"+signed+";", ";x-amz-content-sha256;") {
		return "x-amz-content-sha256 is not signed: " + auth
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "X-Amz-Date: " + err.Error()
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.EscapedPath(), bytes.NewReader(body))
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hash, "s3", "us-east-1", at, func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true
	}); err != nil {
		return err.Error()
	}
	if want := again.Header.Get("Authorization"); want != auth {
		return "signature " + auth + ", S3 computes " + want + " for " + r.URL.EscapedPath()
	}
	if !strings.HasPrefix(r.URL.EscapedPath(), "/envelopes/env/a%2Bb%20c/%C3%A9") {
		return "path " + r.URL.EscapedPath()
	}
	return ""
}
