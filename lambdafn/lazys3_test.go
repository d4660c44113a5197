package lambdafn

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/localtest"
)

// The envelope bucket's client is built by the first call that needs it,
// once, and then serves every call: put, get and delete reach the bucket.
func TestLazyS3BuildsItsClientOnceOnFirstUse(t *testing.T) {
	ctx := context.Background()
	bucket := strings.ToLower(localtest.UniqueName("lazy-s3"))
	if _, err := localtest.S3Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	built := 0
	l := lazyS3{client: sync.OnceValue(func() *s3.Client {
		built++
		return localtest.S3Client(t)
	})}
	if built != 0 {
		t.Fatal("the client was built before any call")
	}
	key, body := aws.String("envelope"), []byte(`{"sealed":"x"}`)
	if _, err := l.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: key, Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	out, err := l.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(got, body) {
		t.Fatalf("read back %q", got)
	}
	if _, err := l.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: key}); err != nil {
		t.Fatal(err)
	}
	if built != 1 {
		t.Fatalf("client built %d times, want once", built)
	}
}
