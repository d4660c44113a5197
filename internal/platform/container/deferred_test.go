package container

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
)

// A failed build is not kept, a successful one is kept for good, and
// requests that arrive together while nothing is built share one build.
func TestADeferredPartIsBuiltOnceAndRetriedOnFailure(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	builds, fail := 0, true
	d := Defer(func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		builds++
		if fail {
			return "", errors.New("parameter store unavailable")
		}
		return "key", nil
	})
	if v, err := d.Get(ctx); err == nil {
		t.Fatalf("a failed build answered %q", v)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v, err := d.Get(ctx); v != "key" || err != nil {
				t.Errorf("Get: %q %v", v, err)
			}
		})
	}
	wg.Wait()
	if builds != 2 {
		t.Fatalf("%d builds, want 2: the failed one, then one shared by every later request", builds)
	}
	if v, err := Built("ready").Get(ctx); v != "ready" || err != nil {
		t.Fatalf("Built: %q %v", v, err)
	}
}

func TestUnavailableIsTheProtocolsRetryableErrorBody(t *testing.T) {
	resp := Unavailable()
	var body struct{ Error, Message string }
	if resp.StatusCode != 503 || resp.Headers["content-type"] != "application/json" ||
		json.Unmarshal([]byte(resp.Body), &body) != nil || body.Error != "server-error" || body.Message == "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}
}
