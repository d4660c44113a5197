package site

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
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
func (c *Client) Stream(ctx context.Context, jobID string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		key, tracked, err := c.streamKey(ctx, jobID)
		if err != nil {
			yield("", err)
			return
		}
		// The durable plane first: the checkpointed text is yielded as one
		// delta and the relay is asked only for what follows it, so a
		// reader whose relay frames are gone still has what was said.
		held := c.readCheckpoint(ctx, jobID)
		if held != "" && !yield(held, nil) {
			return
		}
		cp := c.startCheckpoints(ctx, jobID, tracked.CreatedAt, held)
		defer cp.close()
		for {
			from := stream.UTF16Len(held)
			reader := seal.NewReader(key, jobID, from, held, nil)
			stopped := false
			err := c.attach(ctx, jobID, from, func(raw []byte) bool {
				before := reader.Text()
				reader.Feed(raw)
				if after := reader.Text(); len(after) > len(before) && strings.HasPrefix(after, before) {
					cp.offer(after)
					if !yield(after[len(before):], nil) {
						stopped = true
						return false
					}
				}
				_, done := reader.Terminal()
				return !done
			})
			if stopped {
				return
			}
			if end, done := reader.Terminal(); done {
				switch end.Type {
				case stream.TypeEnd:
					switch end.Status {
					case stream.StatusComplete:
						yield("", nil)
					case stream.StatusInterrupted:
						yield("", ErrStreamInterrupted)
					default:
						yield("", ErrStreamStale)
					}
				case stream.TypeAbsent:
					yield("", ErrStreamAbsent)
				default:
					yield("", ErrStreamStale)
				}
				return
			}
			if ctx.Err() != nil {
				yield("", ctx.Err())
				return
			}
			if err != nil && !errors.Is(err, errAttachClosed) {
				yield("", err)
				return
			}
			// The relay closed its time-boxed response without a terminal:
			// attach again from what is held.
			held = reader.Text()
		}
	}
}

// errAttachClosed is an attach whose body ended without a terminal.
var errAttachClosed = errors.New("site: attach closed")

// streamKey derives the job's stream key from the grant the ledger holds,
// never from this process's memory: with a durable ledger, a job sealed by
// another process (or by this one before a restart) is read the same way.
func (c *Client) streamKey(ctx context.Context, jobID string) (seal.Key, Tracked, error) {
	t, ok, err := c.ledger.Lookup(ctx, jobID)
	if err != nil {
		return seal.Key{}, Tracked{}, ledgerErr(err)
	}
	if !ok || t.Stream == nil || t.Stream.LeaseID == "" {
		return seal.Key{}, Tracked{}, ErrStreamAbsent
	}
	lease, device := t.Stream.LeaseID, t.Stream.Device
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return seal.Key{}, Tracked{}, err
	}
	key, err := seal.SiteKey(c.keys, device, seal.Context{JobID: jobID, LeaseID: lease, DeviceKeyID: deviceKeyID, SiteKeyID: c.keys.KeyID()})
	return key, t, err
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
	idle := time.AfterFunc(attachIdle, cancel)
	defer idle.Stop()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	protocol.SignSiteRequest(c.keys, "attach", c.siteID, c.clock.Now().UnixMilli(), raw).SetHeaders(req.Header, protocol.HeaderSite)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
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

// attachIdle is how long an attach may say nothing (three of the relay's
// keep-alive intervals) before it is taken for dead.
const attachIdle = 45 * time.Second

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
// Events: GET ?job=<id> answers `id: <offset>` and `data: {"text": …}`
// per delta, then one `event: end` (data {"ok": true}); after a stream
// that ended without its seal, `event: result` (data {"text": …}, the
// verified result whole, superseding what was sent) once the ledger has
// it, or else `event: stale`, `event: interrupted` (the device stopped
// before the end) or `event: absent`. A ledger that keeps
// checkpoints (CheckpointLedger) is read first, so the text so far is sent
// even when the relay's frames are gone. The offset is the lane's: UTF-16 code units of text
// sent so far. A browser resuming with `Last-Event-ID` (EventSource does
// on reconnect) or `?from=<offset>` is sent the text after that offset
// only (the larger of the two when both are given), so no character is
// lost or repeated; with neither, it gets the whole text so far. authorize
// runs first; a refusal and a job this site's ledger does not hold are
// the same 404. A known job not sealed yet is waited for up to a minute.
func (c *Client) StreamHandler(authorize Authorize) (http.Handler, error) {
	if authorize == nil {
		return nil, ErrNoAuthorize
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jobID := r.URL.Query().Get("job")
		if jobID == "" {
			http.Error(w, "job is required", http.StatusBadRequest)
			return
		}
		from, ok := resumeOffset(r)
		if !ok {
			http.Error(w, "from and Last-Event-ID are a non-negative offset", http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		if !authorize(r, jobID) {
			http.Error(w, streamRefusal, http.StatusNotFound)
			return
		}
		if _, known, err := c.ledger.Lookup(ctx, jobID); err != nil {
			http.Error(w, "the site's ledger could not be read", http.StatusServiceUnavailable)
			return
		} else if !known {
			http.Error(w, streamRefusal, http.StatusNotFound)
			return
		}
		for wait := time.Now().Add(time.Minute); ; {
			if _, _, err := c.streamKey(ctx, jobID); err == nil || time.Now().After(wait) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache, no-transform")
		w.Header().Set("X-Accel-Buffering", "no")
		flusher, _ := w.(http.Flusher)
		send := func(event string, data any) {
			b, _ := json.Marshal(data)
			if event != "" {
				fmt.Fprintf(w, "event: %s\n", event)
			}
			fmt.Fprintf(w, "data: %s\n\n", b)
			if flusher != nil {
				flusher.Flush()
			}
		}
		var offset int64
		for delta, err := range c.Stream(ctx, jobID) {
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
				fmt.Fprintf(w, "id: %s\n", strconv.FormatInt(offset, 10))
				send("", map[string]string{"text": delta})
			case err == nil:
				send("end", map[string]bool{"ok": true})
			default:
				// No seal from the live plane: the result supersedes what
				// was sent, whole, once this site has it.
				if text, ok := c.awaitResult(ctx, jobID); ok {
					send("result", map[string]string{"text": text})
				} else if errors.Is(err, ErrStreamAbsent) {
					send("absent", map[string]bool{"ok": false})
				} else if errors.Is(err, ErrStreamInterrupted) {
					send("interrupted", map[string]bool{"ok": false})
				} else {
					send("stale", map[string]bool{"ok": false})
				}
			}
		}
	}), nil
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

// resumeOffset is where a browser resumes: the larger of Last-Event-ID and
// ?from=, 0 when neither is given; false for one that is not a
// non-negative integer.
func resumeOffset(r *http.Request) (int64, bool) {
	var from int64
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("from")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		from = max(from, n)
	}
	return from, true
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
