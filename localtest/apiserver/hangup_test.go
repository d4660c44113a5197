package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// lockedBuffer is a log sink the server's goroutines may write while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records are the JSON log records written so far.
func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// waitRecord is the first record whose msg is msg, waiting up to 5 s for
// the server to write it.
func (b *lockedBuffer) waitRecord(t *testing.T, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, rec := range b.records(t) {
			if rec["msg"] == msg {
				return rec
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q record; the log: %v", msg, b.records(t))
	return nil
}

// A client that hangs up mid-request is logged as what it is: the client
// closed the request, after the milliseconds it ran, status 499, at info
// level. A function that really runs past its Timeout is still a timeout,
// an error answered 500. Reading the first as the second sends an
// operator looking for a slow function that does not exist.
func TestAHangUpIsNotATimeout(t *testing.T) {
	blocked := func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		<-ctx.Done()
		return events.APIGatewayV2HTTPResponse{}, ctx.Err()
	}
	started := make(chan struct{}, 1)
	waiting := func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		started <- struct{}{}
		return blocked(ctx, ev)
	}
	hangup := mustRoute(t, "GET", "/hangup", "Waiting")
	hangup.Timeout = 30 * time.Second
	slow := mustRoute(t, "GET", "/slow", "Blocked")
	slow.Timeout = 50 * time.Millisecond
	var logs lockedBuffer
	s, err := New(Config{
		Routes:   []Route{hangup, slow},
		Handlers: map[string]Handler{"Waiting": waiting, "Blocked": blocked},
		Log:      slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)

	t.Run("HangUp", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/hangup", nil)
		go func() {
			<-started
			cancel()
		}()
		begun := time.Now()
		if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
			t.Fatalf("the client's request: %v, want canceled", err)
		}
		rec := logs.waitRecord(t, "client closed the request")
		if rec["level"] != "INFO" || rec["status"] != float64(statusClientClosed) || rec["answeredBy"] != byClient || rec["function"] != "Waiting" {
			t.Fatalf("hang-up record %v", rec)
		}
		if ms, ok := rec["ms"].(float64); !ok || ms > float64(time.Since(begun).Milliseconds()) {
			t.Fatalf("hang-up record's ms %v: the request ran at most %v", rec["ms"], time.Since(begun))
		}
		for _, r := range logs.records(t) {
			if r["msg"] == "function timed out" || r["msg"] == "function error" || r["level"] == "ERROR" {
				t.Fatalf("a hang-up logged %v", r)
			}
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		code, body, _ := get(t, ts.URL+"/slow")
		if code != 500 || body != `{"message":"Internal Server Error"}` {
			t.Fatalf("a timed-out function: %d %q, want API Gateway's 500", code, body)
		}
		rec := logs.waitRecord(t, "function timed out")
		if rec["level"] != "ERROR" || rec["function"] != "Blocked" {
			t.Fatalf("timeout record %v", rec)
		}
		var gw map[string]any
		for _, r := range logs.records(t) {
			if r["msg"] == "api gateway" && r["function"] == "Blocked" {
				gw = r
			}
		}
		if gw == nil || gw["status"] != float64(500) || gw["answeredBy"] != byGateway {
			t.Fatalf("the timed-out request's record %v", gw)
		}
	})
}
