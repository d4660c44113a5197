package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// endlessStreamer streams a word every few milliseconds until its context
// ends (steady), or one word and then nothing until it ends (!steady): a
// model that would run on for as long as nobody stops it.
type endlessStreamer struct {
	daemon.EchoBackend
	steady bool
}

func (b endlessStreamer) RunStream(ctx context.Context, _ string, delta func(string)) (daemon.Answer, error) {
	delta("and ")
	for {
		select {
		case <-ctx.Done():
			return daemon.Answer{}, &daemon.BackendError{Code: "canceled", Message: "the job was canceled"}
		case <-time.After(3 * time.Millisecond):
			if b.steady {
				delta("on ")
			}
		}
	}
}

// streamingWorld is a site, a streaming device serving it, and one
// streaming job running on the device: a frame has reached the log.
type streamingWorld struct {
	*world
	site     *site.Client
	siteKeys *protocol.Keys
	device   *device
}

func startStreamingJob(t *testing.T, backend daemon.Backend) streamingWorld {
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
	d := w.pairDaemon("alice", "runner-a", daemon.Config{Backend: backend,
		Streams: daemon.Streaming{Enabled: true, FlushEvery: 2 * time.Millisecond}})
	stub := protocol.JobStub{ID: "job-1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli(), Streaming: true}
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload("go on")); err != nil {
		t.Fatal(err)
	}
	if w.tick(d) != 1 {
		t.Fatal("the streaming device claimed nothing")
	}
	w.pump(s)
	d.events.waitFor(t, daemon.EventRunning, "job-1")
	sw := streamingWorld{world: w, site: s, siteKeys: keys, device: d}
	deadline := time.Now().Add(waitLimit)
	for len(sw.frames(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no frame reached the stream log")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return sw
}

// frames is the job's stream as the log holds it.
func (sw streamingWorld) frames(t *testing.T) []store.StreamFrame {
	t.Helper()
	ref, found, err := sw.mem.StreamOf(sw.ctx, "shop", "job-1")
	if err != nil || !found {
		t.Fatalf("stream of job-1: found %v, %v", found, err)
	}
	page, err := sw.mem.ReadFrames(sw.ctx, "shop", "job-1", ref.LeaseID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return page.Frames
}

// seal opens the whole log as the site would and returns its terminal.
func (sw streamingWorld) seal(t *testing.T) stream.Frame {
	t.Helper()
	ref, _, err := sw.mem.StreamOf(sw.ctx, "shop", "job-1")
	if err != nil {
		t.Fatal(err)
	}
	key, err := seal.SiteKey(sw.siteKeys, sw.device.keys.Public(), seal.Context{
		JobID: "job-1", LeaseID: ref.LeaseID, DeviceKeyID: sw.device.keys.KeyID(), SiteKeyID: sw.siteKeys.KeyID(),
	})
	if err != nil {
		t.Fatal(err)
	}
	frames := sw.frames(t)
	last := frames[len(frames)-1]
	r := seal.NewReader(key, "job-1", 0, "", nil)
	open := stream.Open("job-1", 0, last.Seq, last.Seq, true)
	feed := func(e seal.Event) {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		r.Feed(raw)
	}
	feed(seal.Event{Clear: &open})
	for _, f := range frames {
		sealed := seal.Frame{N: f.N, From: f.From, Seq: f.Seq, Kind: f.Kind, CT: f.CT}
		feed(seal.Event{Sealed: &sealed})
	}
	end, done := r.Terminal()
	if !done {
		t.Fatalf("the log of %d frames has no terminal the site can open", len(frames))
	}
	return end
}

// The site cancels while the device streams, and no heartbeat goes out: the
// next frame's append answers cancelRequested, and that alone stops the
// model, seals the stream cancelled and reports "canceled".
func TestAppendSayingCancelRequestedStopsTheRun(t *testing.T) {
	sw := startStreamingJob(t, endlessStreamer{steady: true})
	if cancelled, err := sw.site.Cancel(sw.ctx, "job-1"); err != nil || !cancelled {
		t.Fatalf("cancel = %v, %v", cancelled, err)
	}
	// No tick: only the append can tell the device.
	e := sw.device.events.waitFor(t, daemon.EventCancelled, "job-1")
	if e.Detail != "told by a stream append" {
		t.Fatalf("cancelled event %+v: not told by the append", e)
	}
	sw.device.events.waitFor(t, daemon.EventReported, "job-1")
	if end := sw.seal(t); end.Type != stream.TypeEnd || end.Status != stream.StatusCancelled {
		t.Fatalf("the stream ended %+v, want an end sealed cancelled", end)
	}
	rep := sw.pump(sw.site)
	if len(rep.Ended) != 1 || rep.Ended[0].Fate != site.FateCancelled {
		t.Fatalf("ended %+v, results %+v", rep.Ended, rep.Results)
	}
	// Once: a heartbeat naming the same cancel afterwards says nothing new.
	sw.tick(sw.device)
	n := 0
	sw.device.events.mu.Lock()
	for _, e := range sw.device.events.events {
		if e.Type == daemon.EventCancelled {
			n++
		}
	}
	sw.device.events.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d cancelled events, want 1", n)
	}
}

// A model quiet after its first words posts no frame that could carry the
// cancel: the heartbeat does, and the stream is still sealed cancelled
// before the "canceled" result.
func TestHeartbeatCancelSealsAQuietStreamCancelled(t *testing.T) {
	sw := startStreamingJob(t, endlessStreamer{steady: false})
	if cancelled, err := sw.site.Cancel(sw.ctx, "job-1"); err != nil || !cancelled {
		t.Fatalf("cancel = %v, %v", cancelled, err)
	}
	sw.tick(sw.device)
	sw.device.events.waitFor(t, daemon.EventCancelled, "job-1")
	sw.device.events.waitFor(t, daemon.EventReported, "job-1")
	end := sw.seal(t)
	if end.Type != stream.TypeEnd || end.Status != stream.StatusCancelled {
		t.Fatalf("the stream ended %+v, want an end sealed cancelled", end)
	}
	if got := sw.frames(t); got[0].Kind != store.FrameChunk || end.Seq != int64(len("and ")) {
		t.Fatalf("frames %+v, end at %d: the first words are not the whole stream", got, end.Seq)
	}
}

// A device asked to stream whose backend cannot does not opt in: it is
// never offered a streaming job, which a device that streams takes.
func TestANonStreamingBackendIsNotOfferedStreamingJobs(t *testing.T) {
	w := newWorld(t)
	s := w.newSite("shop")
	w.consent("alice", "shop")
	plain := w.pairDaemon("alice", "runner-plain", daemon.Config{Backend: runOnly{}, Streams: daemon.Streaming{Enabled: true}})
	stub := protocol.JobStub{ID: "job-1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli(), Streaming: true}
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload("hello")); err != nil {
		t.Fatal(err)
	}
	if n := w.tick(plain); n != 0 {
		t.Fatalf("a device that cannot stream claimed %d streaming jobs", n)
	}
	streamer := w.pairDaemon("alice", "runner-stream", daemon.Config{Streams: daemon.Streaming{Enabled: true}})
	if n := w.tick(streamer); n != 1 {
		t.Fatalf("the streaming device claimed %d jobs, want 1", n)
	}
}

// runOnly is a backend without RunStream.
type runOnly struct{ echo daemon.EchoBackend }

func (b runOnly) Info() daemon.BackendInfo { return b.echo.Info() }
func (b runOnly) Run(ctx context.Context, prompt string) (daemon.Answer, error) {
	return b.echo.Run(ctx, prompt)
}

// Deployed without an edge, the SSE attach has its own URL (the attach
// function's), which the site is given; and a stream outlasts the site's
// per-call HTTP timeout, which bounds calls, not a live stream. Here the API
// serves no attach at all, the client's timeout is shorter than the
// stream, and the site still reads the whole answer live, then its seal.
func TestASiteStreamsFromAttachURLPastItsCallTimeout(t *testing.T) {
	w := newWorld(t)
	attachSrv := httptest.NewServer(w.relay.AttachHandler())
	t.Cleanup(attachSrv.Close)
	api := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == seal.StreamAttachPath {
			http.NotFound(rw, r)
			return
		}
		w.relay.HTTPHandler().ServeHTTP(rw, r)
	}))
	t.Cleanup(api.Close)
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.admin.RegisterSite(w.ctx, "shop", keys.Public()); err != nil {
		t.Fatal(err)
	}
	// Every call but the stream runs under this timeout too (publish,
	// pump, the stream's own attach), so it is long beside an in-memory
	// call even on a loaded machine, and the stream (ten 300 ms pauses) is
	// three times as long again.
	const callTimeout = time.Second
	s, err := site.New(site.Config{RelayURL: api.URL, StreamAttachURL: attachSrv.URL + seal.StreamAttachPath, SiteID: "shop", Keys: keys,
		Clock: w.clock, RetryBackoff: time.Millisecond, HTTPClient: &http.Client{Timeout: callTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	w.consent("alice", "shop")
	d := w.pairDaemon("alice", "runner-a", daemon.Config{Backend: daemon.EchoBackend{Drip: 300 * time.Millisecond},
		Streams: daemon.Streaming{Enabled: true, FlushEvery: 10 * time.Millisecond}})
	stub := protocol.JobStub{ID: "job-1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli(), Streaming: true}
	prompt := "one two three four five six seven eight nine ten"
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
		t.Fatal(err)
	}
	w.tick(d)
	w.pump(s)
	began := time.Now()
	var text string
	var end error = errors.New("no end")
	for delta, err := range s.Stream(w.ctx, "job-1") {
		if err != nil || delta == "" {
			end = err
			break
		}
		text += delta
	}
	if end != nil {
		t.Fatalf("the stream ended with %v after %q", end, text)
	}
	if took := time.Since(began); took < callTimeout {
		t.Skipf("the stream took %v, no longer than the call timeout: nothing shown", took)
	}
	d.events.waitFor(t, daemon.EventReported, "job-1")
	if text != "echo: "+prompt {
		t.Fatalf("streamed %q", text)
	}
}
