package site

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// Why a stream ended without its seal. Neither is a failure of the job:
// the sealed result still arrives through Pump, and carries the whole text.
var (
	// ErrStreamStale: the live text stopped short (the lease lapsed, the
	// relay misbehaved, frames did not authenticate); read the result.
	ErrStreamStale = errors.New("site: the live stream ended early; the sealed result has the whole text")
	// ErrStreamAbsent: there is no live stream for this job (not claimed
	// yet, not a streaming job, or long finished).
	ErrStreamAbsent = errors.New("site: no live stream for this job")
	// ErrStreamInterrupted: the device sealed the stream `interrupted`
	// (it shut down, or the job's deadline passed, before the answer's
	// end): the text is a prefix; the job goes back to the queue, and its
	// result, if it gets one, comes from another run.
	ErrStreamInterrupted = errors.New("site: the device stopped before the answer's end")
)

// Stream follows a published job's live stream through the relay
// (docs/streaming.md) and yields the text as it grows, one delta at a time.
// It ends after the daemon's seal `complete` (a final nil error), or with
// ErrStreamInterrupted (the seal says `interrupted`), ErrStreamStale (no
// seal, or a seal `cancelled` or `error`: the text stops short) or
// ErrStreamAbsent, or ctx's error. Every frame is opened
// with the key this site shares with the device it sealed the payload to,
// its counter checked and its offsets conformed, so the text yielded is
// always a prefix of what the device produced. The job must have been
// sealed to a device by this client (Pump) before a stream can be read.
//
// A stream is one run of the job: the lease the ledger's grant names when
// Stream starts. Its checkpoint is that lease's only, and the text never
// crosses into another run: when the job is claimed again under another
// lease (its device died and its lease lapsed), the stream ends with
// ErrStreamStale, and so does one whose text ever stops extending what
// was already yielded; the sealed result is the answer then, and a fresh
// Stream reads the new run from its start. Every fault on the way is told
// to Config.OnStreamFault.
func (c *Client) Stream(ctx context.Context, jobID string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		run, err := c.streamRunOf(ctx, jobID)
		if err != nil {
			yield("", err)
			return
		}
		c.readRun(ctx, run, yield)
	}
}

// endOf is how a run that reached its terminal frame ended: nil for
// complete. A stale end that no violation explains is the lease's, and is
// reported as such.
func (c *Client) endOf(run streamRun, end stream.Frame, violated bool) error {
	switch {
	case end.Type == stream.TypeEnd && end.Status == stream.StatusComplete:
		return nil
	case end.Type == stream.TypeEnd && end.Status == stream.StatusInterrupted:
		return ErrStreamInterrupted
	case end.Type == stream.TypeEnd:
		return ErrStreamStale
	case end.Type == stream.TypeAbsent:
		return ErrStreamAbsent
	}
	if !violated {
		c.fault(run.fault(FaultLease, "the relay ended the stream stale: its lease lapsed, or the job ended without the stream's seal", nil))
	}
	return ErrStreamStale
}

// readRun is Stream for one run.
func (c *Client) readRun(ctx context.Context, run streamRun, yield func(string, error) bool) {
	// The durable plane first: the run's checkpointed text is yielded as
	// one delta and the relay is asked only for what follows it, so a
	// reader whose relay frames are gone still has what was said.
	yielded := c.readCheckpoint(ctx, run)
	if yielded != "" && !yield(yielded, nil) {
		return
	}
	cp := c.startCheckpoints(ctx, run, yielded)
	defer cp.close()
	violated := false
	onViolation := func(v seal.Violation) {
		violated = true
		c.fault(c.violationFault(ctx, run, v))
	}
	for {
		from := stream.UTF16Len(yielded)
		reader := seal.NewReader(run.key, run.jobID, from, yielded, onViolation)
		stopped, diverged := false, false
		err := c.attach(ctx, run.jobID, from, func(raw []byte) bool {
			reader.Feed(raw)
			text := reader.Text()
			if !strings.HasPrefix(text, yielded) {
				// Fail closed: text that does not extend what was yielded
				// is not this reader's to show, whatever ends it.
				diverged = true
				return false
			}
			if len(text) > len(yielded) {
				cp.offer(text)
				if !yield(text[len(yielded):], nil) {
					stopped = true
					return false
				}
				yielded = text
			}
			_, done := reader.Terminal()
			return !done
		})
		switch {
		case stopped:
			return
		case diverged:
			c.fault(run.fault(FaultRelay, "the live text stopped extending the text already read", nil))
			yield("", ErrStreamStale)
			return
		}
		if end, done := reader.Terminal(); done {
			yield("", c.endOf(run, end, violated))
			return
		}
		if ctx.Err() != nil {
			yield("", ctx.Err())
			return
		}
		if errors.Is(err, errAttachTimeout) {
			// A relay that does not answer puts the reader on the durable
			// plane (the checkpoint it was given, then the result) rather
			// than holding it.
			c.fault(run.fault(FaultRelay, fmt.Sprintf("the relay did not answer the attach within %v", AttachTimeout), nil))
			yield("", ErrStreamStale)
			return
		}
		if err != nil && !errors.Is(err, errAttachClosed) {
			c.fault(run.fault(FaultRelay, "the attach failed", err))
			yield("", err)
			return
		}
		// The relay closed its time-boxed response without a terminal:
		// attach again from what is held.
	}
}

// violationFault is the fault a reader's violation is: a frame that does
// not open is another run's when the ledger's grant has moved to another
// lease (the job was claimed again), and tampering while it has not.
func (c *Client) violationFault(ctx context.Context, run streamRun, v seal.Violation) StreamFault {
	if !v.Unopened {
		return run.fault(FaultRelay, v.Reason, nil)
	}
	if now, err := c.streamRunOf(ctx, run.jobID); err == nil && now.leaseID != run.leaseID {
		return run.fault(FaultLease, "the job was claimed again under another lease: "+v.Reason, nil)
	}
	return run.fault(FaultTampered, v.Reason, nil)
}

// errAttachClosed is an attach whose body ended without a terminal.
var errAttachClosed = errors.New("site: attach closed")

// errAttachTimeout is an attach the relay did not answer in time.
var errAttachTimeout = errors.New("site: the relay did not answer the attach")

// streamRun is the one run of a job a stream belongs to: the lease the
// ledger's grant names, the key derived for it, and when the job was
// created (its checkpoint's envelope deadline).
type streamRun struct {
	jobID, leaseID string
	key            seal.Key
	createdAt      int64
}

func (r streamRun) fault(kind FaultKind, reason string, err error) StreamFault {
	return StreamFault{Kind: kind, JobID: r.jobID, LeaseID: r.leaseID, Reason: reason, Err: err}
}

// tag names the run to a browser (its event ids) without handing it the
// relay's lease id: a digest of the lease.
func (r streamRun) tag() string {
	sum := sha256.Sum256([]byte("byorelay/v1/stream-run|" + r.leaseID))
	return hex.EncodeToString(sum[:8])
}

// streamRunOf is the run the ledger's grant names, its key derived from
// the grant, never from this process's memory: with a durable ledger, a
// job sealed by another process (or by this one before a restart) is read
// the same way.
func (c *Client) streamRunOf(ctx context.Context, jobID string) (streamRun, error) {
	t, ok, err := c.ledger.Lookup(ctx, jobID)
	if err != nil {
		return streamRun{}, ledgerErr(err)
	}
	if !ok || t.Stream == nil || t.Stream.LeaseID == "" {
		return streamRun{}, ErrStreamAbsent
	}
	lease, device := t.Stream.LeaseID, t.Stream.Device
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return streamRun{}, err
	}
	key, err := seal.SiteKey(c.keys, device, seal.Context{JobID: jobID, LeaseID: lease, DeviceKeyID: deviceKeyID, SiteKeyID: c.keys.KeyID()})
	if err != nil {
		return streamRun{}, err
	}
	return streamRun{jobID: jobID, leaseID: lease, key: key, createdAt: t.CreatedAt}, nil
}

// attach reads one SSE attach, handing each event's data to each until it
// returns false or the body ends.
func (c *Client) attach(ctx context.Context, jobID string, from int64, each func([]byte) bool) error {
	raw, err := protocol.Encode(seal.AttachRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, JobID: jobID, From: from})
	if err != nil {
		return err
	}
	url := c.attachURL
	if url == "" {
		url = c.relayURL + seal.StreamAttachPath
	}
	// An SSE response lasts the relay's window (90 s), longer than the
	// client's per-call timeout, so that timeout is lifted here; silence is
	// not: the relay says something at least every 15 s, so attachIdle of
	// nothing is a dead connection, closed and attached again.
	client := c.http
	if client.Timeout > 0 {
		lifted := *client
		lifted.Timeout = 0
		client = &lifted
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	protocol.SignSiteRequest(c.keys, "attach", c.siteID, c.clock.Now().UnixMilli(), raw).SetHeaders(req.Header, protocol.HeaderSite)
	var unanswered atomic.Bool
	answer := time.AfterFunc(AttachTimeout, func() {
		unanswered.Store(true)
		cancel()
	})
	resp, err := client.Do(req)
	if !answer.Stop() && unanswered.Load() {
		if err == nil {
			resp.Body.Close()
		}
		return errAttachTimeout
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	idle := time.AfterFunc(attachIdle, cancel)
	defer idle.Stop()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("site: attach: HTTP %d", resp.StatusCode)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A relay without the SSE transport answers the long-poll form.
		var lp struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&lp); err != nil {
			return err
		}
		for _, e := range lp.Events {
			if !each(e) {
				return nil
			}
		}
		return errAttachClosed
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64*1024), 1<<20)
	for lines.Scan() {
		idle.Reset(attachIdle)
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok && !each([]byte(data)) {
			return nil
		}
	}
	if err := lines.Err(); err != nil && actx.Err() == nil {
		return err
	}
	return errAttachClosed
}

// attachIdle is how long an answered attach may say nothing (three of the
// relay's keep-alive intervals) before it is taken for dead.
const attachIdle = 45 * time.Second

// AttachTimeout bounds how long the relay may take to answer an attach
// (its status and headers, which an SSE attach sends at once, before any
// frame): a relay that has not answered by then is taken for hung, and
// the reader goes to the durable plane (the checkpoint, then the sealed
// result) instead of waiting on it; the stream ends ErrStreamStale. It
// bounds the first answer only: an answered stream may wait as long as
// its device takes to say something. A relay that answers an attach in
// the long-poll form answers only when it has events, so a quiet stream
// there meets this bound; the SSE attach is the one to point at.
const AttachTimeout = 2 * time.Second

// Authorize decides whether the browser request r may read jobID's stream.
// It is consulted before anything reveals whether the job or its stream
// exists; false refuses, exactly as an unknown job is refused.
type Authorize func(r *http.Request, jobID string) bool

// ErrNoAuthorize is StreamHandler without an authorize function: a stream
// handler that lets anyone who knows a job id read its text is not built.
var ErrNoAuthorize = errors.New("site: StreamHandler needs an authorize function (there is no default allow)")

// streamRefusal is the one answer to a browser that may not read the
// stream: refused by authorize and unknown job alike, so a caller cannot
// tell a job that exists from one that does not.
const streamRefusal = "no such stream"

// StreamHandler re-serves a job's live stream to a browser as Server-Sent
// Events: GET ?job=<id> answers `id: <run>:<offset>` and
// `data: {"text": …}` per delta, then one `event: end` (data {"ok": true});
// after a stream that ended without its seal, `event: result` (data
// {"text": …}, the verified result whole, superseding what was sent) once
// the ledger has it, or else `event: stale`, `event: interrupted` (the
// device stopped before the end) or `event: absent`. A ledger that keeps
// checkpoints (CheckpointLedger) is read first, so the text so far is
// sent even when the relay's frames are gone.
//
// The offset is the lane's: UTF-16 code units of text sent so far; the
// run names the lease whose stream it is (a digest, not the lease id). A
// browser resuming with `Last-Event-ID` (EventSource does on reconnect)
// or `?from=<run>:<offset>` is sent the text after that offset only (the
// larger of the two when both are given), so no character is lost or
// repeated. An offset of another run (the job was claimed again under
// another lease since), or one that names no run and so cannot be checked
// (a bare `?from=<offset>`), is not resumed: the browser is sent
// `event: restart` (data {}), which says to drop the text it holds, then
// the current run from its start. With neither it gets the whole text so
// far. authorize runs first; a refusal and a job this site's ledger does
// not hold are the same 404. A known job not sealed yet is waited for up
// to a minute.
func (c *Client) StreamHandler(authorize Authorize) (http.Handler, error) {
	if authorize == nil {
		return nil, ErrNoAuthorize
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jobID, points, ok := c.admitStream(w, r, authorize)
		if !ok {
			return
		}
		ctx := r.Context()
		run, ok, runErr := c.waitForRun(ctx, jobID)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache, no-transform")
		w.Header().Set("X-Accel-Buffering", "no")
		c.serveRun(ctx, newEventWriter(w), jobID, run, runErr, points)
	}), nil
}

// admitStream reads a StreamHandler request and answers it when it may not
// go on: no job, an unreadable resume point, a caller authorize refuses, a
// job the site's ledger does not hold (the same 404 as a refusal, so the
// answer says nothing of another person's jobs).
func (c *Client) admitStream(w http.ResponseWriter, r *http.Request, authorize Authorize) (string, []resumePoint, bool) {
	jobID := r.URL.Query().Get("job")
	if jobID == "" {
		http.Error(w, "job is required", http.StatusBadRequest)
		return "", nil, false
	}
	points, ok := resumePoints(r)
	if !ok {
		http.Error(w, "from and Last-Event-ID are a non-negative offset, or a run and an offset (<run>:<offset>)", http.StatusBadRequest)
		return "", nil, false
	}
	if !authorize(r, jobID) {
		http.Error(w, streamRefusal, http.StatusNotFound)
		return "", nil, false
	}
	if _, known, err := c.ledger.Lookup(r.Context(), jobID); err != nil {
		http.Error(w, "the site's ledger could not be read", http.StatusServiceUnavailable)
		return "", nil, false
	} else if !known {
		http.Error(w, streamRefusal, http.StatusNotFound)
		return "", nil, false
	}
	return jobID, points, true
}

// waitForRun is the job's stream run, waiting up to a minute for a device
// to open one, or why there is none; false when the caller went away
// meanwhile.
func (c *Client) waitForRun(ctx context.Context, jobID string) (streamRun, bool, error) {
	for wait := time.Now().Add(time.Minute); ; {
		run, err := c.streamRunOf(ctx, jobID)
		if err == nil || time.Now().After(wait) {
			return run, true, err
		}
		select {
		case <-ctx.Done():
			return streamRun{}, false, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// eventWriter writes Server-Sent Events, each flushed as it is written.
type eventWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

func newEventWriter(w http.ResponseWriter) eventWriter {
	f, _ := w.(http.Flusher)
	return eventWriter{w: w, flusher: f}
}

// send writes one event; id, when set, is the event's resume id.
func (e eventWriter) send(id, event string, data any) {
	b, _ := json.Marshal(data)
	if id != "" {
		fmt.Fprintf(e.w, "id: %s\n", id)
	}
	if event != "" {
		fmt.Fprintf(e.w, "event: %s\n", event)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if e.flusher != nil {
		e.flusher.Flush()
	}
}

// serveRun sends run's text from the browser's resume point, then how it
// ended. A run the browser did not resume starts with a restart event,
// so the page drops what it holds of another run.
func (c *Client) serveRun(ctx context.Context, e eventWriter, jobID string, run streamRun, runErr error, points []resumePoint) {
	deltas := func(yield func(string, error) bool) { yield("", runErr) }
	var from int64
	if runErr == nil {
		deltas = func(yield func(string, error) bool) { c.readRun(ctx, run, yield) }
		var resumed bool
		if from, resumed = resumeIn(points, run.tag()); !resumed {
			e.send("", "restart", struct{}{})
		}
	}
	var offset int64
	for delta, err := range deltas {
		switch {
		case err == nil && delta != "":
			start := offset
			offset += stream.UTF16Len(delta)
			if offset <= from {
				continue // the browser holds it already
			}
			if start < from {
				delta = afterUTF16(delta, from-start)
			}
			e.send(run.tag()+":"+strconv.FormatInt(offset, 10), "", map[string]string{"text": delta})
		case err == nil:
			e.send("", "end", map[string]bool{"ok": true})
		default:
			// No seal from the live plane: the result supersedes what
			// was sent, whole, once this site has it.
			if text, ok := c.awaitResult(ctx, jobID); ok {
				e.send("", "result", map[string]string{"text": text})
			} else if errors.Is(err, ErrStreamAbsent) {
				e.send("", "absent", map[string]bool{"ok": false})
			} else if errors.Is(err, ErrStreamInterrupted) {
				e.send("", "interrupted", map[string]bool{"ok": false})
			} else {
				e.send("", "stale", map[string]bool{"ok": false})
			}
		}
	}
}

// resultWait bounds how long StreamHandler waits, after a stream that
// ended without its seal, for the result to reach the ledger (Pump collects
// it); a job that ends without one stops the wait at once.
const resultWait = time.Minute

// awaitResult is the job's verified ok text once the ledger holds it;
// false if the job ended otherwise, or resultWait passed, or ctx ended.
func (c *Client) awaitResult(ctx context.Context, jobID string) (string, bool) {
	for wait := time.Now().Add(resultWait); ; {
		t, ok, err := c.ledger.Lookup(ctx, jobID)
		if err == nil && ok && t.Ended != "" {
			if t.Result == nil || t.Result.Outcome != OutcomeOK || t.Result.Text == nil {
				return "", false
			}
			return *t.Result.Text, true
		}
		if err == nil && !ok {
			return "", false
		}
		if time.Now().After(wait) {
			return "", false
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// resumePoint is one place a browser asked to resume: an offset, and the
// run it is in ("" when the browser named none).
type resumePoint struct {
	run    string
	offset int64
}

// resumePoints are the places a browser asked to resume at, from
// Last-Event-ID and ?from=, each `<offset>` or `<run>:<offset>`; false
// for one that is neither (an offset that is not a non-negative integer).
func resumePoints(r *http.Request) ([]resumePoint, bool) {
	var points []resumePoint
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from")} {
		if v == "" {
			continue
		}
		run, offset, named := strings.Cut(v, ":")
		if !named {
			run, offset = "", v
		}
		n, err := strconv.ParseInt(offset, 10, 64)
		if err != nil || n < 0 || (named && run == "") {
			return nil, false
		}
		points = append(points, resumePoint{run: run, offset: n})
	}
	return points, true
}

// resumeIn is where a browser resumes in the run tagged run: the largest
// offset it named in that run; 0 when it named nothing to resume. false
// when it asked to resume but named no point in this run (another run's,
// or a bare offset that cannot be checked against a re-run): it must
// drop what it holds and take this run from its start.
func resumeIn(points []resumePoint, run string) (int64, bool) {
	var from int64
	matched, asked := false, false
	for _, p := range points {
		if p.run == run {
			from, matched = max(from, p.offset), true
		} else if p.run != "" || p.offset > 0 {
			asked = true
		}
	}
	return from, matched || !asked
}

// afterUTF16 is s without its first n UTF-16 code units. An offset inside
// a surrogate pair (never one this handler sent) resumes at that
// character, so half a character is never sent.
func afterUTF16(s string, n int64) string {
	var units int64
	for i, r := range s {
		w := int64(1)
		if r > 0xFFFF {
			w = 2
		}
		if units+w > n {
			return s[i:]
		}
		units += w
	}
	return ""
}
