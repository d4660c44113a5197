package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/stream"
	"github.com/byorelay/byorelay/stream/seal"
)

// DefaultFlushEvery is how often a live stream posts a frame while text
// arrives: the relay's append throttle is sized from it (README.md,
// "Sizing a deployment").
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
		text, closed := p.pending.String(), p.closed
		p.pending.Reset()
		p.mu.Unlock()
		p.send(text)
		if closed {
			return
		}
	}
}

// finish flushes and seals the end.
func (p *publisher) finish(status stream.Status) {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wake <- struct{}{}
	<-p.done
	if p.failed {
		return
	}
	f, err := p.sealer.End(status, "")
	if err == nil {
		p.post(f)
	}
}

// send posts text as one or more frames, each within the frame bound.
func (p *publisher) send(text string) {
	for text != "" && !p.failed {
		cut := splitUnits(text, seal.MaxTextUnits)
		f, err := p.sealer.Chunk(text[:cut])
		if err != nil {
			p.failed = true
			return
		}
		p.post(f)
		text = text[cut:]
	}
}

// post appends one frame, retrying what a retry can fix; any refusal
// (a lapsed lease, a frame out of order) stops the stream.
func (p *publisher) post(f seal.Frame) {
	ctx, cancel := context.WithTimeout(p.d.life, callTimeout)
	defer cancel()
	req := seal.AppendFrameRequest{ProtocolVersion: protocol.ProtocolVersion, JobID: p.job.ID, LeaseID: p.job.Lease.ID, Frame: f}
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var resp seal.AppendFrameResponse
		err := p.d.post(ctx, streamAppendEndpoint, req, &resp, true)
		if err == nil {
			if resp.CancelRequested {
				p.siteCancelled()
			}
			return
		}
		var ce *CallError
		if !errors.As(err, &ce) || !ce.Retryable() || attempt >= 3 || p.d.sleep(ctx, wait) != nil {
			p.failed = true
			p.d.emit(Event{Type: EventError, JobID: p.job.ID, Site: p.job.Site, Detail: "stream: " + err.Error()})
			return
		}
		wait *= 2
	}
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
