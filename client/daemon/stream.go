package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// DefaultFlushEvery is how often a live stream posts a frame while text
// arrives: the relay's append throttle is sized from it
// (docs/sizing.md).
const DefaultFlushEvery = 150 * time.Millisecond

// Streaming configures live streams (docs/streaming.md).
type Streaming struct {
	// Enabled opts in: the daemon tells the relay on every claim, and
	// streams every job whose stub asks for it when the backend can.
	Enabled bool
	// FlushEvery is how long text is coalesced before a frame is posted;
	// 0 means DefaultFlushEvery. Each frame costs a request and a
	// transactional write, so frames are per interval, not per token.
	FlushEvery time.Duration
}

// StreamingBackend is a Backend that can hand over its answer as it is
// produced. delta is called with each new piece, in order; it never
// blocks. The returned Answer is the whole text, which the sealed result
// carries as a non-streamed job's would.
type StreamingBackend interface {
	Backend
	RunStream(ctx context.Context, prompt string, delta func(string)) (Answer, error)
}

const streamAppendEndpoint = "append"

// streamsOn is whether this daemon opts in on its claims: only when it was
// asked to and its backend can stream. A device that took streaming jobs it
// cannot stream would leave their sites watching a stream that never moves
// while a device that can stream goes without.
func (d *Daemon) streamsOn() bool {
	_, ok := d.backend.(StreamingBackend)
	return d.streams.Enabled && ok
}

// answer runs the backend, streaming when the job, this daemon and the
// backend all can. A stream that fails costs the site smoothness only: the
// sealed result still carries the whole answer.
func (d *Daemon) answer(ctx context.Context, job protocol.ClaimedStub, prompt string) (Answer, error) {
	sb, ok := d.backend.(StreamingBackend)
	if !job.Streaming || !d.streamsOn() || !ok {
		return d.backend.Run(ctx, prompt)
	}
	p, err := d.newPublisher(job)
	if err != nil {
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "stream: " + err.Error()})
		return d.backend.Run(ctx, prompt)
	}
	if !d.openStream() {
		// Shutdown has begun: it ended the job's context, so the run ends
		// at once and is not reported; a stream opened now would post its
		// end after the release, which the relay refuses.
		return d.backend.Run(ctx, prompt)
	}
	defer d.streamsOpen.Done()
	go p.pump()
	answer, err := sb.RunStream(ctx, prompt, p.push)
	// Posted before the result, so it holds the lease: the relay keeps
	// the end back until the result is stored.
	p.finish(endStatus(ctx, err))
	return answer, err
}

// endStatus is what the stream's seal says of how the run ended: the
// protocol's cancelled outcome for a site's cancel (told by a heartbeat or
// by an append's cancelRequested), whatever error the backend gave on the
// way out.
func endStatus(ctx context.Context, err error) stream.Status {
	switch {
	case errors.Is(context.Cause(ctx), errCancelledBySite):
		return stream.StatusCancelled
	case err == nil:
		return stream.StatusComplete
	case ctx.Err() != nil:
		// The deadline, a lost lease or a shutdown: the job did not finish
		// here. (A lost lease's end is refused anyway.)
		return stream.StatusInterrupted
	default:
		return stream.StatusError
	}
}

// StreamEndBound is how long a stream may take, once its backend has
// returned, to post the text still held and its end frame. Shutdown waits
// at most this long for every open stream to post its end (`interrupted`)
// before it releases the leases: a release first would make the relay refuse
// the end, and readers would learn only from liveness or the sweep.
const StreamEndBound = 3 * time.Second

// Backoff after a stall (an append whose tries all failed): the next try
// waits stallBackoffMin, doubling to stallBackoffMax. Text that arrives
// meanwhile is coalesced into the next frame, so a relay outage costs
// smoothness, not text.
const (
	stallBackoffMin = 250 * time.Millisecond
	stallBackoffMax = 5 * time.Second
)

// publisher coalesces deltas and posts them as sealed frames from its own
// goroutine, so the model is never blocked on the relay.
type publisher struct {
	d      *Daemon
	job    protocol.ClaimedStub
	sealer *seal.Sealer
	every  time.Duration

	mu      sync.Mutex
	pending strings.Builder
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	// The fields below are the pump's alone until done is closed, then
	// finish's: no lock.

	// held is a sealed frame the relay has not acknowledged. It is posted
	// again, unchanged, before anything after it: the relay may have
	// appended it and lost the answer, and it takes a repeat of the same
	// frame as a duplicate, where a re-sealed one would fork the stream.
	held    *seal.Frame
	retryAt time.Time
	backoff time.Duration
	stalled bool // a stall is being reported; cleared when a frame lands
	failed  bool // the relay refused a frame; the rest goes with the result
	// cancelled: an append answered cancelRequested and the job was stopped.
	cancelled bool
}

func (d *Daemon) newPublisher(job protocol.ClaimedStub) (*publisher, error) {
	pin, ok := d.pinFor(job.Site)
	if !ok {
		return nil, errors.New("no pinned key for the job's site")
	}
	key, err := seal.DeviceKey(d.keys, pin, seal.Context{
		JobID: job.ID, LeaseID: job.Lease.ID, DeviceKeyID: d.keys.KeyID(), SiteKeyID: job.Site,
	})
	if err != nil {
		return nil, err
	}
	every := d.streams.FlushEvery
	if every <= 0 {
		every = DefaultFlushEvery
	}
	return &publisher{d: d, job: job, sealer: seal.NewSealer(key), every: every, wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// push is the backend's delta callback: append and return.
func (p *publisher) push(text string) {
	p.mu.Lock()
	if !p.closed {
		p.pending.WriteString(text)
	}
	p.mu.Unlock()
}

// pump posts what has gathered every interval until finish.
func (p *publisher) pump() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.wake:
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if time.Now().Before(p.retryAt) {
			continue // backing off; pending keeps gathering
		}
		p.flush(p.d.life)
	}
}

// flush posts the held frame, then what has gathered, as frames within the
// frame bound. It returns false if anything is still unsent.
func (p *publisher) flush(ctx context.Context) bool {
	if p.failed {
		return false
	}
	if p.held != nil && !p.post(ctx, *p.held) {
		return false
	}
	p.held = nil
	p.mu.Lock()
	text := p.pending.String()
	p.pending.Reset()
	p.mu.Unlock()
	for text != "" {
		cut := splitUnits(text, seal.MaxTextUnits)
		f, err := p.sealer.Chunk(text[:cut])
		if err != nil {
			p.failed = true
			return false
		}
		text = text[cut:]
		if !p.post(ctx, f) {
			// Not yet appended: keep the frame, and put back the text not
			// yet sealed so the next frame carries it.
			p.held = &f
			p.mu.Lock()
			rest := text + p.pending.String()
			p.pending.Reset()
			p.pending.WriteString(rest)
			p.mu.Unlock()
			return false
		}
	}
	return true
}

// finish flushes and seals the end, within StreamEndBound. It uses its own
// context, not the daemon's life: on Shutdown the life has ended, and the
// end frame `interrupted` is exactly what Shutdown needs posted.
func (p *publisher) finish(status stream.Status) {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wake <- struct{}{}
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), StreamEndBound)
	defer cancel()
	p.retryAt = time.Time{}
	for !p.flush(ctx) {
		if p.failed || ctx.Err() != nil || p.d.sleep(ctx, p.backoff) != nil {
			return
		}
	}
	f, err := p.sealer.End(status, "")
	if err != nil {
		return
	}
	for !p.postEnd(ctx, f, status == stream.StatusInterrupted) {
		if p.failed || ctx.Err() != nil || p.d.sleep(ctx, p.backoff) != nil {
			return
		}
	}
}

// post appends one frame, retrying what a retry can fix, and reports
// whether it was appended. Retries exhausted are a stall: reported, backed
// off, and the stream goes on. Any refusal (a lapsed lease, a frame out of
// order) stops the stream; the sealed result still carries the answer.
func (p *publisher) post(ctx context.Context, f seal.Frame) bool { return p.postEnd(ctx, f, false) }

// postEnd is post, telling the relay in clear when the frame is the
// `interrupted` end, which it then passes to readers at once instead of
// holding it for a result this lease will not store.
func (p *publisher) postEnd(ctx context.Context, f seal.Frame, interrupted bool) bool {
	req := seal.AppendFrameRequest{ProtocolVersion: protocol.ProtocolVersion, JobID: p.job.ID, LeaseID: p.job.Lease.ID, Frame: f,
		Interrupted: interrupted}
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var resp seal.AppendFrameResponse
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		err := p.d.post(callCtx, streamAppendEndpoint, req, &resp, true)
		cancel()
		if err == nil {
			if resp.CancelRequested {
				p.siteCancelled()
			}
			if p.stalled {
				p.stalled = false
				p.d.emit(Event{Type: EventStreamResumed, JobID: p.job.ID, Site: p.job.Site, Detail: fmt.Sprintf("frame %d appended", f.N)})
			}
			p.backoff, p.retryAt = 0, time.Time{}
			return true
		}
		var ce *CallError
		if !errors.As(err, &ce) || !ce.Retryable() {
			if ctx.Err() == nil {
				p.failed = true
				p.d.emit(Event{Type: EventError, JobID: p.job.ID, Site: p.job.Site, Detail: "stream: " + err.Error()})
			}
			return false
		}
		if attempt >= 3 || p.d.sleep(ctx, wait) != nil {
			p.stall(err)
			return false
		}
		wait *= 2
	}
}

// stall reports an append whose tries all failed and sets the backoff.
func (p *publisher) stall(err error) {
	p.backoff = min(max(2*p.backoff, stallBackoffMin), stallBackoffMax)
	p.retryAt = time.Now().Add(p.backoff)
	p.d.streamStalls.Add(1)
	p.stalled = true
	p.d.emit(Event{Type: EventStreamStalled, JobID: p.job.ID, Site: p.job.Site, Detail: fmt.Sprintf("stream: %v; next try in %v", err, p.backoff)})
}

// siteCancelled stops the job the moment an append says the site cancelled
// it, as a heartbeat naming the lease would: the backend's context ends, the
// stream is sealed cancelled and the result reports "canceled". Without it
// the model would keep producing (and the device keep paying) until the
// next heartbeat. Only the pump's goroutine and finish (after the pump has
// stopped) post, so the flag needs no lock.
func (p *publisher) siteCancelled() {
	if p.cancelled {
		return
	}
	p.cancelled = true
	if p.d.stop(p.job.Lease.ID, errCancelledBySite) {
		p.d.emit(Event{Type: EventCancelled, JobID: p.job.ID, Site: p.job.Site, Detail: "told by a stream append"})
	}
}

// splitUnits is the longest prefix of s (at a rune boundary) of at most max
// UTF-16 units.
func splitUnits(s string, max int64) int {
	var units int64
	for i, r := range s {
		n := int64(1)
		if r >= 0x10000 {
			n = 2
		}
		if units+n > max {
			return i
		}
		units += n
	}
	return len(s)
}

// RunStream echoes a word at a time, pausing Drip between words.
func (e EchoBackend) RunStream(ctx context.Context, prompt string, delta func(string)) (Answer, error) {
	answer, err := e.Run(ctx, prompt)
	if err != nil {
		return answer, err
	}
	for rest := answer.Text; rest != ""; {
		i := strings.IndexByte(rest[min(1, len(rest)):], ' ')
		word := rest
		if i >= 0 {
			word = rest[:i+1]
		}
		delta(word)
		rest = rest[len(word):]
		if e.Drip > 0 && rest != "" {
			t := time.NewTimer(e.Drip)
			select {
			case <-ctx.Done():
				t.Stop()
				return Answer{}, &BackendError{Code: "canceled", Message: "the job was canceled"}
			case <-t.C:
			}
		}
	}
	return answer, nil
}
