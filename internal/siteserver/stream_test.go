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

// sseText is the text of an SSE answer's data events, and its last id.
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
		}
	}
	return text.String(), lastID, event
}

// A browser resuming at any offset, by Last-Event-ID or ?from=, is sent
// exactly the text after it, through a process that did not seal the job;
// a tab with no offset gets the whole text so far.
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
	read := func(target, lastEventID string) (string, string, string) {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return sseText(t, rec.Body.String())
	}
	if got, id, end := read("/stream?job=s1", ""); got != full || id != strconv.Itoa(len(full)) || end != "end" {
		t.Fatalf("a fresh tab got %q (last id %s, %s), want %q", got, id, end, full)
	}
	for k := 0; k <= len(full); k++ {
		for _, how := range []string{"from", "Last-Event-ID"} {
			var got, id, end string
			if how == "from" {
				got, id, end = read("/stream?job=s1&from="+strconv.Itoa(k), "")
			} else {
				got, id, end = read("/stream?job=s1", strconv.Itoa(k))
			}
			if full[:k]+got != full || end != "end" {
				t.Fatalf("resumed by %s at %d: got %q (%s), want %q", how, k, got, end, full[k:])
			}
			if got != "" && id != strconv.Itoa(len(full)) {
				t.Fatalf("resumed by %s at %d: last id %s, want %d", how, k, id, len(full))
			}
		}
	}
}
