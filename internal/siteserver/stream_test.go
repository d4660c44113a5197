package siteserver_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitememory "github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/protocol"
)

// streamAll reads a job's whole live stream through s.
func streamAll(t *testing.T, w *cloudWorld, s *siteserver.Server, id string) (string, error) {
	t.Helper()
	var got strings.Builder
	var last error
	for delta, err := range s.Stream(w.ctx, id) {
		got.WriteString(delta)
		last = err
	}
	return got.String(), last
}

// A job sealed by one site process is streamed by another on the same
// store, and by a third started after the first is gone: the stream is
// keyed to the grant the seal wrote to the store, not to the memory of the
// process that sealed it.
func TestAnyProcessOnTheStoreReadsAJobsStream(t *testing.T) {
	w := newCloudWorldWith(t, func(clk *clock.Manual) sitestore.Store {
		return sitememory.New(sitememory.Options{Clock: clk})
	}, daemon.Streaming{Enabled: true})
	sealer := w.start(nil)
	reader := w.start(nil)

	payload, _ := json.Marshal(map[string]string{"prompt": "one two three"})
	if _, err := sealer.Enqueue(w.ctx, siteserver.EnqueueInput{ID: "s1", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true}); err != nil {
		t.Fatal(err)
	}
	var before error
	for _, err := range reader.Stream(w.ctx, "s1") {
		before = err
	}
	if !errors.Is(before, site.ErrStreamAbsent) {
		t.Fatalf("a job sealed to nobody streams: %v", before)
	}
	w.settle(sealer, w.ended("s1"))
	w.wantVerified("s1", "one two three")
	if g := w.job("s1").StreamGrant; g == nil || g.LeaseID == "" || g.Device.Identity == "" {
		t.Fatalf("the seal wrote no stream grant: %+v", g)
	}
	for name, s := range map[string]*siteserver.Server{"another process": reader, "a process started later": w.start(nil)} {
		got, err := streamAll(t, w, s, "s1")
		if err != nil || got != echoOf("one two three") {
			t.Fatalf("%s streamed %q, %v; want %q", name, got, err, echoOf("one two three"))
		}
	}
}

// sseText is the text of an SSE answer's data events, its last id and its
// last named event.
func sseText(t *testing.T, body string) (string, string, string) {
	t.Helper()
	var text strings.Builder
	var lastID, event string
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "id: "):
			lastID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "":
			var d struct{ Text string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			text.WriteString(d.Text)
		case strings.HasPrefix(line, "data: ") && event == "restart":
			// It says to drop what is held; what follows is the run from
			// its start.
			event = ""
		}
	}
	return text.String(), lastID, event
}

// A browser resuming at any offset of the run it holds, by Last-Event-ID
// or ?from=<run>:<offset>, is sent exactly the text after it, through a
// process that did not seal the job; a tab with no offset gets the whole
// text so far. An offset that names another run, or none (a bare number
// cannot be checked against a re-run), is told to restart and sent the
// whole text.
func TestTheBrowserLegResumesAtTheOffsetItHolds(t *testing.T) {
	w := newCloudWorldWith(t, func(clk *clock.Manual) sitestore.Store {
		return sitememory.New(sitememory.Options{Clock: clk})
	}, daemon.Streaming{Enabled: true})
	sealer := w.start(nil)
	payload, _ := json.Marshal(map[string]string{"prompt": "one two three four"})
	if _, err := sealer.Enqueue(w.ctx, siteserver.EnqueueInput{ID: "s1", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true}); err != nil {
		t.Fatal(err)
	}
	w.settle(sealer, w.ended("s1"))
	full := echoOf("one two three four")
	h, err := w.start(nil).StreamHandler(func(*http.Request, string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	read := func(target, lastEventID string) (string, string, string, bool) {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		text, id, end := sseText(t, rec.Body.String())
		return text, id, end, strings.HasPrefix(rec.Body.String(), "event: restart\n")
	}
	got, id, end, restarted := read("/stream?job=s1", "")
	run, offset, named := strings.Cut(id, ":")
	if got != full || !named || offset != strconv.Itoa(len(full)) || end != "end" || restarted {
		t.Fatalf("a fresh tab got %q (last id %s, %s, restart %v), want %q", got, id, end, restarted, full)
	}
	for k := 0; k <= len(full); k++ {
		at := run + ":" + strconv.Itoa(k)
		for _, how := range []string{"from", "Last-Event-ID"} {
			if how == "from" {
				got, id, end, restarted = read("/stream?job=s1&from="+at, "")
			} else {
				got, id, end, restarted = read("/stream?job=s1", at)
			}
			if full[:k]+got != full || end != "end" || restarted {
				t.Fatalf("resumed by %s at %s: got %q (%s, restart %v), want %q", how, at, got, end, restarted, full[k:])
			}
			if got != "" && id != run+":"+strconv.Itoa(len(full)) {
				t.Fatalf("resumed by %s at %s: last id %s, want %s:%d", how, at, id, run, len(full))
			}
		}
	}
	for _, at := range []string{"5", "0123456789abcdef:5", "0123456789abcdef:0"} {
		for _, how := range []string{"from", "Last-Event-ID"} {
			if how == "from" {
				got, _, end, restarted = read("/stream?job=s1&from="+at, "")
			} else {
				got, _, end, restarted = read("/stream?job=s1", at)
			}
			if got != full || end != "end" || !restarted {
				t.Fatalf("resumed by %s at %s, which is not this run's: got %q (%s, restart %v), want a restart and %q",
					how, at, got, end, restarted, full)
			}
		}
	}
}
