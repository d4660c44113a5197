package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log the stack's goroutines write while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The local stack logs a request, and the demo import its banner
// reports, only with -v, as the README says: by default a request writes
// nothing, so the banner stays on the screen; warnings and errors are
// written either way.
func TestServeLogsRequestsOnlyWithV(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		opts := serveOptions{store: storeMemory, host: "127.0.0.1", demoDir: filepath.Join(t.TempDir(), "demo"), sweepEvery: time.Hour, verbose: verbose}
		var logs syncBuffer
		log := serveLogger(opts, &logs)
		ls, err := startLocal(t.Context(), opts, log, &logs)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(ls.url+"/byollm/claim", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		log.Warn("a warning")
		log.Error("an error")
		ls.close()

		out := logs.String()
		requests := strings.Contains(out, "msg=request ") && strings.Contains(out, "path=/byollm/claim")
		if requests != verbose {
			t.Errorf("-v %v: the request logged %v; the log:\n%s", verbose, requests, out)
		}
		// The banner reports the demo import; its info records print only
		// with -v.
		if imported := strings.Contains(out, "projection import"); imported != verbose {
			t.Errorf("-v %v: the demo import logged %v; the log:\n%s", verbose, imported, out)
		}
		if !strings.Contains(out, `msg="a warning"`) || !strings.Contains(out, `msg="an error"`) {
			t.Errorf("-v %v: a warning or an error was not logged:\n%s", verbose, out)
		}
	}
}

// What drops the per-request records keeps every other record and its
// attributes, at any level.
func TestWithoutRequestsDropsOnlyPerRequestInfo(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(withoutRequests{slog.NewTextHandler(&buf, nil)}).With("stack", "local")
	log.Info("request", "status", 200)
	log.Info("decision", "decision", "claimed")
	log.Warn("request", "status", 500)
	log.Info("pairing approved", "runner", "runner_1")
	got := buf.String()
	if strings.Contains(got, "status=200") || strings.Contains(got, "decision=claimed") {
		t.Errorf("a per-request info record was written:\n%s", got)
	}
	for _, want := range []string{"level=WARN msg=request stack=local status=500", `msg="pairing approved" stack=local runner=runner_1`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q:\n%s", want, got)
		}
	}
}
