package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// streamWorld is a world whose daemon holds a running job and whose site
// and daemon have derived that lease's stream keys.
type streamWorld struct {
	*world
	job     protocol.ClaimedStub
	sealer  *seal.Sealer
	siteKey seal.Key
}

func newStreamWorld(t *testing.T, f storeFactory) *streamWorld {
	w := newWorld(t, f, func(c *relay.Config) {
		// The long-poll's window bounds its store reads too (the stream's
		// head, its frames, the result that releases the seal), so it is
		// long beside a loaded machine's DynamoDB Local round trips: a
		// short one would end a poll with the frames or the seal unread.
		// Only a poll with nothing to say waits it out.
		c.Streams = relay.StreamOptions{LongPollWait: 5 * time.Second, PollEvery: 20 * time.Millisecond, LivenessEvery: 50 * time.Millisecond}
	})
	w.enqueue(w.site, "job-1", "alice")
	job := w.claim(w.daemon, 1)[0]
	w.seal(w.site, "job-1", w.daemon.Public())
	expectStatus(t, w.daemonCall(w.daemon, "fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: "job-1", LeaseID: job.Lease.ID}), 200)
	ctx := seal.Context{JobID: "job-1", LeaseID: job.Lease.ID, DeviceKeyID: w.daemon.Keys.KeyID(), SiteKeyID: w.site.KeyID()}
	dk, err := seal.DeviceKey(w.daemon.Keys, w.site.Public(), ctx)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := seal.SiteKey(w.site.Keys, w.daemon.Public(), ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &streamWorld{world: w, job: job, sealer: seal.NewSealer(dk), siteKey: sk}
}

func (w *streamWorld) appendReq(f seal.Frame) relay.Request {
	req := relaytest.SignedDaemonRequest(w.t, w.daemon.Keys, w.daemon.RunnerID, "append", w.now(),
		seal.AppendFrameRequest{ProtocolVersion: "2", JobID: "job-1", LeaseID: w.job.Lease.ID, Frame: f})
	req.Path = seal.StreamAppendPath
	return req
}

func (w *streamWorld) push(text string) seal.Frame {
	w.t.Helper()
	f, err := w.sealer.Chunk(text)
	if err != nil {
		w.t.Fatal(err)
	}
	expectStatus(w.t, w.do(w.appendReq(f)), 200)
	return f
}

func (w *streamWorld) attachReq(s *relaytest.Site, jobID string, from int64) relay.Request {
	req := relaytest.SignedSiteRequest(w.t, s.Keys, s.SiteID, "attach", w.now(),
		seal.AttachRequest{ProtocolVersion: "2", SiteID: s.SiteID, JobID: jobID, From: from})
	req.Path = seal.StreamAttachPath
	return req
}

// poll long-polls once from the offset the reader holds, as a fresh
// subscription (a Reader, like rindle's conform, is per attach), and feeds
// it every event.
func (w *streamWorld) poll(held string, from int64) (*seal.Reader, seal.AttachResponse) {
	w.t.Helper()
	var reasons []string
	reader := seal.NewReader(w.siteKey, "job-1", from, held, func(v seal.Violation) { reasons = append(reasons, v.Reason) })
	defer func() {
		if len(reasons) > 0 {
			w.t.Logf("violations: %q", reasons)
		}
	}()
	resp := w.do(w.attachReq(w.site, "job-1", from))
	expectStatus(w.t, resp, 200)
	var raw struct {
		Events []json.RawMessage `json:"events"`
		Done   bool              `json:"done"`
	}
	if err := json.Unmarshal(resp.Body, &raw); err != nil {
		w.t.Fatal(err)
	}
	for _, e := range raw.Events {
		reader.Feed(e)
	}
	// encoding/json, not the strict v2 decoder: events are a union that
	// seal.Event decodes itself.
	var got seal.AttachResponse
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		w.t.Fatalf("decode %s: %v", resp.Body, err)
	}
	return reader, got
}

func TestAStreamIsAppendedUnderLeaseAndReadByTheSite(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		first := w.push("Hello")
		w.push(", wörld")
		reader, got := w.poll("", 0)
		if got.Done || reader.Text() != "Hello, wörld" {
			t.Fatalf("first poll: done %v, text %q", got.Done, reader.Text())
		}

		// A retry after a lost acknowledgement is answered, not appended.
		expect(t, w.do(w.appendReq(first)), 200, `{"seq":12,"n":2,"duplicate":true}`)
		// A frame from the future is refused and changes nothing.
		skipped := first
		skipped.N, skipped.From, skipped.Seq = 5, 40, 45
		expect(t, w.do(w.appendReq(skipped)), 409, errBody(protocol.CodeBadRequest, "that frame is not the stream's next one"))

		w.push("!")
		end, err := w.sealer.End(stream.StatusComplete, "")
		if err != nil {
			t.Fatal(err)
		}
		expect(t, w.do(w.appendReq(end)), 200, `{"seq":13,"n":4}`)

		// The seal waits for the stored result.
		reader, got = w.poll(reader.Text(), 12)
		if got.Done {
			t.Fatalf("the stream ended before the result was stored: %+v", got)
		}
		env := w.daemon.SealResult(t, "job-1", `{"outcome":"ok"}`, w.site.Public(), w.deadline())
		expectStatus(t, w.daemonCall(w.daemon, "result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: "job-1", LeaseID: w.job.Lease.ID, Disposition: "ok", Envelope: env}), 200)
		reader, got = w.poll(reader.Text(), 13)
		term, ok := reader.Terminal()
		if !got.Done || !ok || term.Type != stream.TypeEnd || term.Status != stream.StatusComplete || reader.Text() != "Hello, wörld!" {
			t.Fatalf("after the result: done %v, terminal %+v, text %q", got.Done, term, reader.Text())
		}
		// A late reader from 0 gets the whole text and the seal.
		reader, _ = w.poll("", 0)
		if term, _ := reader.Terminal(); term.Type != stream.TypeEnd || reader.Text() != "Hello, wörld!" {
			t.Fatalf("late reader: terminal %+v, text %q", term, reader.Text())
		}
	})
}

// An end whose append says interrupted is passed to readers at once, with
// no result stored, and the reader opens the seal's own status; the flag
// on a chunk is bad input, refused with the protocol's error body, and
// appends nothing.
func TestAnInterruptedEndReachesTheReaderWithoutAResult(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		first := w.push("half an ans")
		bad := relaytest.SignedDaemonRequest(w.t, w.daemon.Keys, w.daemon.RunnerID, "append", w.now(),
			seal.AppendFrameRequest{ProtocolVersion: "2", JobID: "job-1", LeaseID: w.job.Lease.ID, Frame: first, Interrupted: true})
		bad.Path = seal.StreamAppendPath
		expect(t, w.do(bad), 400, errBody(protocol.CodeBadRequest, "request failed schema validation"))
		if page, err := w.store.(store.StreamLog).ReadFrames(w.ctx, "site-a", "job-1", w.job.Lease.ID, 0, 0); err != nil || len(page.Frames) != 1 {
			t.Fatalf("after the refused chunk the stream holds %+v, %v; want the one frame", page, err)
		}

		end, err := w.sealer.End(stream.StatusInterrupted, "")
		if err != nil {
			t.Fatal(err)
		}
		req := relaytest.SignedDaemonRequest(w.t, w.daemon.Keys, w.daemon.RunnerID, "append", w.now(),
			seal.AppendFrameRequest{ProtocolVersion: "2", JobID: "job-1", LeaseID: w.job.Lease.ID, Frame: end, Interrupted: true})
		req.Path = seal.StreamAppendPath
		expect(t, w.do(req), 200, `{"seq":11,"n":2}`)
		reader, got := w.poll("", 0)
		term, ok := reader.Terminal()
		if !got.Done || !ok || term.Type != stream.TypeEnd || term.Status != stream.StatusInterrupted || reader.Text() != "half an ans" {
			t.Fatalf("done %v, terminal %+v, text %q; want the sealed end interrupted with no result stored", got.Done, term, reader.Text())
		}
	})
}

func TestAttachHidesOtherSitesJobsAndRefusesUnsigned(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		w.push("secret")
		other := relaytest.NewSite(t, "site-b")
		w.project(w.base().Site(other).Consent("alice", "site-a"))
		// Authorised as site-b, asking for site-a's job: the same answer
		// as a job that does not exist.
		expect(t, w.do(w.attachReq(other, "job-1", 0)), 200, `{"events":[{"type":"absent"}],"done":true}`)
		expect(t, w.do(w.attachReq(w.site, "no-such-job", 0)), 200, `{"events":[{"type":"absent"}],"done":true}`)
		unsigned := w.attachReq(w.site, "job-1", 0)
		unsigned.Header = http.Header{}
		expect(t, w.do(unsigned), 401, errBody(protocol.CodeUnauthorized, "this request is not signed"))
	})
}

func TestALapsedLeaseIsRefusedAndItsStreamEndsStale(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		w.push("half an ans")
		w.advance(w.cfg.LeaseMs + 60_001)
		f2, err := w.sealer.Chunk("wer")
		if err != nil {
			t.Fatal(err)
		}
		expect(t, w.do(w.appendReq(f2)), 403, errBody(protocol.CodeForbidden, "that lease is no longer current"))
		if _, err := w.store.(store.StreamLog).SweepStreams(w.ctx); err != nil {
			t.Fatal(err)
		}
		reader, got := w.poll("", 0)
		term, _ := reader.Terminal()
		if !got.Done || term.Type != stream.TypeStale || reader.Text() != "half an ans" {
			t.Fatalf("done %v, terminal %+v, text %q", got.Done, term, reader.Text())
		}
	})
}

// The SSE transport delivers frames as they are appended: the reader sees
// the first text while the daemon is still producing.
func TestAttachOverSSEDeliversFramesAsTheyArrive(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		srv := httptest.NewServer(w.relay.HTTPHandler())
		defer srv.Close()
		req := w.attachReq(w.site, "job-1", 0)
		hr, err := http.NewRequest(http.MethodPost, srv.URL+req.Path, bytes.NewReader(req.Body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header = req.Header.Clone()
		hr.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		reader := seal.NewReader(w.siteKey, "job-1", 0, "", nil)
		lines := bufio.NewScanner(resp.Body)
		next := func() string {
			for lines.Scan() {
				if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
					reader.Feed([]byte(data))
					return data
				}
			}
			t.Fatalf("stream ended: %v", lines.Err())
			return ""
		}
		w.push("one ")
		for !strings.Contains(next(), `"sealed"`) {
		}
		if reader.Text() != "one " {
			t.Fatalf("after the first frame: %q", reader.Text())
		}
		w.push("two")
		for !strings.Contains(next(), `"sealed"`) {
		}
		if reader.Text() != "one two" {
			t.Fatalf("after the second frame: %q", reader.Text())
		}
	})
}

// A 0.1.1 daemon never sends the opt-in header, so it is never offered a
// stub with streaming set; the claim's bytes are v2's either way.
func TestStreamingJobsGoOnlyToDevicesThatOptedIn(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		stub := w.site.Stub("live", "alice", w.deadline())
		stub.Streaming = true
		expectStatus(t, w.siteCall(w.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: w.site.SiteID, Stub: stub}), 200)
		if got := w.claim(w.daemon, 1); len(got) != 0 {
			t.Fatalf("a daemon that did not opt in was offered %+v", got)
		}
		req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
		req.Header.Set(seal.StreamsHeader, seal.StreamsVersion1)
		resp := w.do(req)
		expectStatus(t, resp, 200)
		if got := decode[protocol.ClaimResponse](t, resp).Jobs; len(got) != 1 || !got[0].Streaming {
			t.Fatalf("the opted-in daemon got %+v", got)
		}
	})
}

// hookedLog is the test's store with one hook after a frame read: what
// another Lambda does between this attach's reads, at exactly the worst
// moment.
type hookedLog struct {
	streamBackend
	mu    sync.Mutex
	after func()
}

type streamBackend interface {
	backend
	store.StreamLog
}

func (h *hookedLog) ReadFrames(ctx context.Context, siteID, jobID, leaseID string, from int64, max int) (store.StreamPage, error) {
	page, err := h.streamBackend.ReadFrames(ctx, siteID, jobID, leaseID, from, max)
	h.mu.Lock()
	after := h.after
	h.after = nil
	h.mu.Unlock()
	if after != nil {
		after()
	}
	return page, err
}

// The daemon appends its end and stores its result between an attach's
// read of the frames and its next liveness read: the reader still gets the
// end (the frames are read once more before the job counts as finished
// without one), not `stale`.
func TestAnEndRightBeforeTheResultIsSeenBetweenReads(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		var hooked *hookedLog
		w := newStreamWorld(t, storeFactory{name: f.name, new: func(t *testing.T, opts store.Options) backend {
			hooked = &hookedLog{streamBackend: f.new(t, opts).(streamBackend)}
			return hooked
		}})
		w.push("the whole answer")
		end, err := w.sealer.End(stream.StatusComplete, "")
		if err != nil {
			t.Fatal(err)
		}
		hooked.mu.Lock()
		hooked.after = func() {
			// Past the liveness interval, so this same turn of the
			// attach's loop reads liveness next.
			time.Sleep(3 * w.cfg.Streams.LivenessEvery)
			expectStatus(t, w.do(w.appendReq(end)), 200)
			env := w.daemon.SealResult(t, "job-1", `{"outcome":"ok"}`, w.site.Public(), w.deadline())
			expectStatus(t, w.daemonCall(w.daemon, "result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: "job-1", LeaseID: w.job.Lease.ID, Disposition: "ok", Envelope: env}), 200)
		}
		hooked.mu.Unlock()
		reader := seal.NewReader(w.siteKey, "job-1", 0, "", nil)
		srv := httptest.NewServer(w.relay.HTTPHandler())
		defer srv.Close()
		req := w.attachReq(w.site, "job-1", 0)
		hr, err := http.NewRequest(req.Method, srv.URL+req.Path, strings.NewReader(string(req.Body)))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header = req.Header.Clone()
		hr.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				reader.Feed([]byte(data))
				if _, done := reader.Terminal(); done {
					break
				}
			}
		}
		term, ok := reader.Terminal()
		if !ok || term.Type != stream.TypeEnd || term.Status != stream.StatusComplete || reader.Text() != "the whole answer" {
			t.Fatalf("terminal %+v (%v), text %q; want the seal", term, ok, reader.Text())
		}
	})
}
