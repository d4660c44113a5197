package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// refusingAppends is a mock, and the only one here: a relay outage cannot
// be produced with the real relay in process, so this transport fails the
// first `refuse` stream appends as an unreachable relay would (no answer
// at all) and passes everything else, and every later append, to the real
// relay untouched.
type refusingAppends struct {
	refuse  int64
	refused atomic.Int64
}

func (f *refusingAppends) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == seal.StreamAppendPath && f.refused.Add(1) <= f.refuse {
		return nil, errors.New("connection refused (injected)")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// callLog passes every call to the real relay and notes, in order, each
// release and each stream append's frame kind and answer status.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) RoundTrip(r *http.Request) (*http.Response, error) {
	var note string
	switch r.URL.Path {
	case seal.StreamAppendPath:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req seal.AppendFrameRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		note = "append " + req.Frame.Kind
		if req.Interrupted {
			note += " interrupted"
		}
	case "/byollm/release":
		note = "release"
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if note != "" && err == nil {
		c.mu.Lock()
		c.calls = append(c.calls, fmt.Sprintf("%s %d", note, resp.StatusCode))
		c.mu.Unlock()
	}
	return resp, err
}

// publishStreaming registers a site, pairs a streaming device with cfg and
// publishes one streaming job, claimed and opened.
func publishStreaming(t *testing.T, cfg daemon.Config, prompt string) streamingWorld {
	t.Helper()
	w := newWorld(t)
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.admin.RegisterSite(w.ctx, "shop", keys.Public()); err != nil {
		t.Fatal(err)
	}
	s, err := site.New(site.Config{RelayURL: w.url, SiteID: "shop", Keys: keys, Clock: w.clock, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", cfg)
	stub := protocol.JobStub{ID: "job-1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli(), Streaming: true}
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
		t.Fatal(err)
	}
	if w.tick(d) != 1 {
		t.Fatal("the streaming device claimed nothing")
	}
	w.pump(s)
	return streamingWorld{world: w, site: s, siteKeys: keys, device: d}
}

// readStream reads the site's stream to its end.
func readStream(ctx context.Context, s *site.Client) (string, error) {
	var text string
	for delta, err := range s.Stream(ctx, "job-1") {
		if err != nil || delta == "" {
			return text, err
		}
		text += delta
	}
	return text, errors.New("the stream stopped without an end")
}

// Appends fail for two stalls' worth of tries (three each, then one more),
// then the relay answers again: the stream is not given up, the text that
// arrived meanwhile goes in later frames, and the reader ends with every
// character exactly once.
func TestAStreamOutlastsFailingAppendsAndLosesNothing(t *testing.T) {
	faults := &refusingAppends{refuse: 7}
	prompt := strings.Repeat("word ", 40) + "end"
	sw := publishStreaming(t, daemon.Config{
		Backend:    daemon.EchoBackend{Drip: 5 * time.Millisecond},
		HTTPClient: &http.Client{Transport: faults},
		Sleep:      quickSleep,
		Streams:    daemon.Streaming{Enabled: true, FlushEvery: 5 * time.Millisecond},
	}, prompt)
	w, s, d := sw.world, sw.site, sw.device
	text, err := readStream(w.ctx, s)
	if err != nil {
		t.Fatalf("the stream ended with %v after %q", err, text)
	}
	if text != "echo: "+prompt {
		t.Fatalf("streamed %q, want %q", text, "echo: "+prompt)
	}
	if n := d.StreamStalls(); n < 2 {
		t.Fatalf("%d stalls counted, want at least 2 (7 appends refused, 3 tries each)", n)
	}
	if !d.events.has(daemon.EventStreamStalled, "job-1") || !d.events.has(daemon.EventStreamResumed, "job-1") {
		t.Fatal("the stall and the resumption were not reported as events")
	}
	if faults.refused.Load() <= faults.refuse {
		t.Fatal("no append went through after the refusals")
	}
	d.events.waitFor(t, daemon.EventReported, "job-1")
}

// Shutdown in the middle of a stream: the device seals the stream
// `interrupted` in the log before it releases the lease (a release first
// would have the end refused), and the reader's stream ends within
// StreamEndBound. The relay holds a daemon's end until the job's result
// is stored, but the append says in clear that this one is `interrupted`,
// so the relay passes it at once and the reader opens the seal's own
// status: site.ErrStreamInterrupted, never `stale` by liveness or the
// sweep, nor a wait for a result this lease will not store.
func TestShutdownMidStreamEndsInterruptedWithinTheBound(t *testing.T) {
	calls := &callLog{}
	sw := publishStreaming(t, daemon.Config{
		Backend:    endlessStreamer{steady: true},
		HTTPClient: &http.Client{Transport: calls},
		Streams:    daemon.Streaming{Enabled: true, FlushEvery: 2 * time.Millisecond},
	}, "go on")
	w, s, d := sw.world, sw.site, sw.device
	d.events.waitFor(t, daemon.EventRunning, "job-1")
	type result struct {
		text string
		err  error
		at   time.Time
	}
	read := make(chan result, 1)
	go func() {
		text, err := readStream(w.ctx, s)
		read <- result{text, err, time.Now()}
	}()
	deadline := time.Now().Add(waitLimit)
	for len(sw.frames(t)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not get going")
		}
		time.Sleep(2 * time.Millisecond)
	}
	began := time.Now()
	if err := d.Shutdown(w.ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	var got result
	select {
	case got = <-read:
	case <-time.After(waitLimit):
		t.Fatal("the reader's stream never ended")
	}
	if !errors.Is(got.err, site.ErrStreamInterrupted) {
		t.Fatalf("the reader's stream ended with %v, want %v", got.err, site.ErrStreamInterrupted)
	}
	if took := got.at.Sub(began); took > daemon.StreamEndBound {
		t.Fatalf("the reader's stream ended %v after Shutdown, beyond the bound %v", took, daemon.StreamEndBound)
	}
	if !strings.HasPrefix(got.text, "and on ") {
		t.Fatalf("streamed %q", got.text)
	}
	calls.mu.Lock()
	log := slices.Clone(calls.calls)
	calls.mu.Unlock()
	end, release := slices.Index(log, "append "+seal.KindEnd+" interrupted 200"), slices.Index(log, "release 200")
	if end < 0 || release < end {
		t.Fatalf("calls %q: want the end frame appended, said interrupted, then the release", log)
	}
	if !d.events.has(daemon.EventReleased, "") {
		t.Fatal("the lease was not released after the end")
	}
}

// Streaming jobs that reach their run while Shutdown is under way: job-2
// once Shutdown has begun (job-1's stream has posted its end `interrupted`,
// so Shutdown is waiting on the open streams or past it), job-3 once the
// leases are released. Neither opens a stream, so no stream is counted in
// while Shutdown waits on the count (which -race would report), and no
// append follows the release (the relay would refuse it).
func TestNoStreamOpensOnceShutdownBegan(t *testing.T) {
	calls := &callLog{}
	gates := map[string]chan struct{}{"job-2": make(chan struct{}), "job-3": make(chan struct{})}
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{
		Backend:     endlessStreamer{steady: true},
		HTTPClient:  &http.Client{Transport: calls},
		Streams:     daemon.Streaming{Enabled: true, FlushEvery: 2 * time.Millisecond},
		Concurrency: 3,
		// Runs in the job's goroutine, just before the run opens its stream.
		OnEvent: func(e daemon.Event) {
			if gate, ok := gates[e.JobID]; ok && e.Type == daemon.EventRunning {
				<-gate
			}
		},
	})
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
			DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli(), Streaming: true}
		if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload("go on")); err != nil {
			t.Fatal(err)
		}
	}
	// A pair holds at most two grants unsealed, so the third claim waits
	// for a pump to seal the first two.
	claimed := 0
	for range 5 {
		claimed += w.tick(d)
		w.pump(s)
		if claimed == 3 {
			break
		}
	}
	if claimed != 3 {
		t.Fatalf("the device claimed %d jobs, want 3", claimed)
	}
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		d.events.waitFor(t, daemon.EventRunning, id)
	}
	frames := func(id string) int {
		t.Helper()
		ref, found, err := w.mem.StreamOf(w.ctx, "shop", id)
		if err != nil || !found {
			return 0
		}
		page, err := w.mem.ReadFrames(w.ctx, "shop", id, ref.LeaseID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Frames)
	}
	// job-1 streams, so Shutdown has a stream to wait for.
	deadline := time.Now().Add(waitLimit)
	for frames("job-1") < 3 {
		if time.Now().After(deadline) {
			t.Fatal("job-1's stream did not get going")
		}
		time.Sleep(2 * time.Millisecond)
	}
	called := func(note string) {
		t.Helper()
		deadline := time.Now().Add(waitLimit)
		for {
			calls.mu.Lock()
			done := slices.Contains(calls.calls, note)
			calls.mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q call", note)
			}
			time.Sleep(time.Millisecond)
		}
	}

	shut := make(chan error, 1)
	go func() { shut <- d.Shutdown(w.ctx) }()
	called("append " + seal.KindEnd + " interrupted 200")
	close(gates["job-2"])
	called("release 200")
	close(gates["job-3"])
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Shutdown never returned")
	}

	for _, id := range []string{"job-2", "job-3"} {
		if n := frames(id); n != 0 {
			t.Errorf("%s, run after Shutdown began, streamed %d frames", id, n)
		}
	}
	calls.mu.Lock()
	log := slices.Clone(calls.calls)
	calls.mu.Unlock()
	if release := slices.Index(log, "release 200"); release != len(log)-1 {
		t.Fatalf("calls %q: want nothing after the release", log)
	}
}
