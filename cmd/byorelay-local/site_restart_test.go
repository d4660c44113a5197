package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/localtest"
)

// make site keeps its table across restarts, as make run does: a job
// enqueued on one run is still there on the next, and --fresh starts
// empty. Each run starts its own DynamoDB Local on the kept directory
// (three JVM starts: seconds, a minute on a loaded machine).
func TestASiteKeepsItsTableAcrossRestarts(t *testing.T) {
	t.Setenv(localtest.EnvDynamoEndpoint, "")
	dir := t.TempDir()
	args := []string{"--port", "0", "--keys", filepath.Join(dir, "site-keys.json"), "--ddb-dir", filepath.Join(dir, "dynamodb")}
	// run starts the site, calls the app API at its origin, and stops it.
	run := func(extra []string, call func(post func(path, body string) int)) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		out, w := io.Pipe()
		done := make(chan int, 1)
		go func() {
			defer w.Close()
			done <- runSite(ctx, append(append([]string{}, args...), extra...), w, io.Discard)
		}()
		origin := ""
		sc := bufio.NewScanner(out)
		for origin == "" && sc.Scan() {
			if _, url, ok := strings.Cut(sc.Text(), "byollm connect "); ok {
				origin = url
			}
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
		if origin == "" {
			cancel()
			t.Fatalf("the site never said where it serves (exit %d)", <-done)
		}
		call(func(path, body string) int {
			resp, err := http.Post(origin+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		})
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("the site exited %d on a stop", code)
			}
		case <-time.After(time.Minute):
			t.Fatal("the site did not stop")
		}
	}
	const job = `{"jobId":"kept-1","owner":"alice"}`
	run(nil, func(post func(string, string) int) {
		if got := post("/app/enqueue", `{"id":"kept-1","kind":"llm.generate","owner":"alice","payload":{"prompt":"still here?"}}`); got != http.StatusOK && got != http.StatusCreated {
			t.Fatalf("enqueue: %d", got)
		}
	})
	run(nil, func(post func(string, string) int) {
		if got := post("/app/job", job); got != http.StatusOK {
			t.Fatalf("after a restart, the job answers %d, want 200: the table was not kept", got)
		}
	})
	run([]string{"--fresh"}, func(post func(string, string) int) {
		if got := post("/app/job", job); got != http.StatusNotFound {
			t.Fatalf("after a --fresh start, the job answers %d, want 404", got)
		}
	})
}
