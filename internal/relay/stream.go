package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func storeFrame(f seal.Frame) store.StreamFrame {
	return store.StreamFrame{N: f.N, From: f.From, Seq: f.Seq, Kind: f.Kind, CT: f.CT}
}

func sealFrame(f store.StreamFrame) seal.Frame {
	return seal.Frame{N: f.N, From: f.From, Seq: f.Seq, Kind: f.Kind, CT: f.CT}
}

var (
	streamsOff = fail(http.StatusNotImplemented, protocol.CodeServerError, "this relay keeps no stream log")
	outOfOrder = fail(http.StatusConflict, protocol.CodeBadRequest, "that frame is not the stream's next one")
)

func (r *Relay) streamLog() (store.StreamLog, bool) {
	l, ok := r.store.(store.StreamLog)
	return l, ok
}

// streamAppend appends one frame. Signed, revocation-checked and decoded as
// every daemon call is; fenced by the job's current lease in the store's
// own atomic step, so a daemon whose lease lapsed is refused (stale-lease)
// and stands down.
func (r *Relay) streamAppend(c *call, _ *request, who caller, req seal.AppendFrameRequest) (reply, error) {
	l, _ := r.streamLog()
	out, err := l.AppendFrame(c.ctx, store.AppendFrameInput{JobID: req.JobID, RunnerID: who.runnerID, LeaseID: req.LeaseID,
		Frame: storeFrame(req.Frame), Interrupted: req.Interrupted})
	if err != nil {
		return reply{}, err
	}
	switch out.Refused {
	case "":
	case store.RefusedOutOfOrder:
		r.decide(c, "refuse-frame-out-of-order", slog.Int64("n", req.Frame.N), slog.Int64("next", out.N))
		return outOfOrder, nil
	default:
		r.decide(c, "refuse-frame", slog.String("refusal", string(out.Refused)))
		return refusalReply(out.Refused, ""), nil
	}
	r.decide(c, "frame-appended", slog.Int64("n", req.Frame.N), slog.Int64("seq", out.Seq), slog.Bool("duplicate", out.Duplicate))
	return ok(seal.AppendFrameResponse{Seq: out.Seq, N: out.N, Duplicate: out.Duplicate, CancelRequested: out.Cancelled}), nil
}

func streamsOptIn(h http.Header) bool { return h.Get(seal.StreamsHeader) == seal.StreamsVersion1 }

// streamPoll is the long-poll attach: it follows the stream until it has
// something to say or LongPollWait passes.
func (r *Relay) streamPoll(c *call, _ *request, _ string, req seal.AttachRequest) (reply, error) {
	ctx, cancel := boxed(c.ctx, r.streamOpts().LongPollWait)
	defer cancel()
	resp := seal.AttachResponse{Events: []seal.Event{}}
	err := r.follow(ctx, req, func(e seal.Event) error {
		resp.Events = append(resp.Events, e)
		if (e.Clear != nil && e.Clear.Terminal()) || (e.Sealed != nil && e.Sealed.Kind == seal.KindEnd) {
			resp.Done = true
		}
		return nil
	}, true)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return reply{}, err
	}
	return ok(resp), nil
}

// StreamOptions tune attach. Zero values take the defaults.
type StreamOptions struct {
	// AttachTimeout bounds the first read, rindle's relayAttachTimeoutMs:
	// a store that does not answer yields absent, not a hung request.
	AttachTimeout time.Duration
	// LongPollWait is how long a long-poll waits for something to say.
	LongPollWait time.Duration
	// SSEWindow time-boxes one SSE response: Lambda bills a stream until
	// it ends even if the reader left, so the body closes (without a
	// terminal) and EventSource reconnects with Last-Event-ID.
	SSEWindow time.Duration
	// PollEvery is the longest pause between reads of a quiet stream.
	PollEvery time.Duration
	// LivenessEvery is how often a quiet stream's job is re-read to see
	// whether its lease is still live.
	LivenessEvery time.Duration
}

func (r *Relay) streamOpts() StreamOptions {
	o := r.cfg.Streams
	if o.AttachTimeout <= 0 {
		o.AttachTimeout = 2 * time.Second
	}
	if o.LongPollWait <= 0 {
		o.LongPollWait = 20 * time.Second
	}
	if o.SSEWindow <= 0 {
		o.SSEWindow = 90 * time.Second
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 400 * time.Millisecond
	}
	if o.LivenessEvery <= 0 {
		o.LivenessEvery = 2 * time.Second
	}
	return o
}

// follow replays the stream of (site, job) from req.From and follows its
// tail, calling emit for each event until a terminal or ctx ends. With
// once set it returns as soon as a read produced events (long-poll).
//
// What it says, in order: `absent` when the site's job has no holder (the
// same for another site's job id, so attach is no existence oracle); an
// `open` at the first frame it will send (at or below the requested
// offset, never above, so the reader has no hole); sealed frames in
// counter order, each a `durable` point since the log committed it; the
// daemon's sealed end only once the job's result is stored, or at once
// when its append said it is the `interrupted` end (a device that stopped
// before the answer's end stores no result under this lease); `stale` when
// the lease lapsed (the sweep marked the stream interrupted, or the job
// moved on) or the job finished with no end: the reader goes to the sealed
// result.
func (r *Relay) follow(ctx context.Context, req seal.AttachRequest, emit func(seal.Event) error, once bool) error {
	l, _ := r.streamLog()
	o := r.streamOpts()
	f := &follower{req: req, emit: emit, pos: req.From, next: -1}

	first, cancel := context.WithTimeout(ctx, o.AttachTimeout)
	ref, found, err := l.StreamOf(first, req.SiteID, req.JobID)
	cancel()
	if err != nil || !found {
		if err != nil && ctx.Err() == nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "stream attach", slog.String("job", req.JobID), slog.String("error", err.Error()))
		}
		return f.say(stream.Absent())
	}

	// Pacing below uses the process's own clock: it decides how often to
	// read, never what is true; every fact comes from the store.
	//
	// doneSeen: a liveness read found the result stored with no end read
	// yet. The daemon appends its end before it posts the result, so the
	// end may have landed after the frames were read: they are read once
	// more before the job counts as finished without an end.
	doneSeen := false
	lastLiveness := time.Now()
	pause := 25 * time.Millisecond
	for {
		page, err := l.ReadFrames(ctx, req.SiteID, req.JobID, ref.LeaseID, f.pos, 0)
		if err != nil {
			return err
		}
		said, err := f.sendPage(page)
		if err != nil {
			return err
		}
		if page.More {
			continue
		}
		if f.heldEnd != nil && page.Header != nil && page.Header.EndInterrupted {
			// The device's own `interrupted` end: readers learn it now,
			// not by liveness or the sweep. The sealed status is the
			// reader's to check; this flag only lets it through.
			return f.sendEnd()
		}
		if page.Header != nil && page.Header.Interrupted {
			return f.say(stream.Stale(f.pos, f.pos))
		}
		// The seal waits for the stored result (the job's terminal sealed
		// result is the stream's durable plane: `end` before it would be
		// an over-claim), and liveness is re-read now and then.
		if f.heldEnd != nil || time.Since(lastLiveness) >= o.LivenessEvery {
			ref2, found, err := l.StreamOf(ctx, req.SiteID, req.JobID)
			if err != nil {
				return err
			}
			lastLiveness = time.Now()
			switch {
			case found && ref2.LeaseID == ref.LeaseID && ref2.Done && f.heldEnd != nil:
				return f.sendEnd()
			case found && ref2.LeaseID == ref.LeaseID && ref2.Done && f.heldEnd == nil && !doneSeen:
				doneSeen = true
				continue
			case !found || ref2.LeaseID != ref.LeaseID || (!ref2.Live && !ref2.Done) || (ref2.Done && f.heldEnd == nil):
				return f.say(stream.Stale(f.pos, f.pos))
			}
		}
		if once && said {
			return nil
		}
		if said {
			pause = 25 * time.Millisecond
		} else {
			pause = min(pause*2, o.PollEvery)
		}
		if err := clock.Sleep(ctx, pause); err != nil {
			return err
		}
	}
}

// follower is what follow has sent of one stream.
type follower struct {
	req  seal.AttachRequest
	emit func(seal.Event) error
	// pos is the offset the reader has been sent up to; next the counter
	// of the first frame not yet sent (-1 before any).
	pos, next int64
	opened    bool
	// heldEnd is the daemon's sealed end, read but not yet sent.
	heldEnd *store.StreamFrame
}

func (f *follower) say(frame stream.Frame) error { return f.emit(seal.Event{Clear: &frame}) }

// sendPage sends a page's sealed frames past those already sent, after an
// `open` at the first (at or below the requested offset, never above, so
// the reader has no hole), then a `durable` point. The end frame is held
// (heldEnd), not sent. said is whether a frame was sent.
func (f *follower) sendPage(page store.StreamPage) (said bool, err error) {
	for _, frame := range page.Frames {
		if f.next >= 0 && frame.N < f.next {
			continue // read again: the frame ending at pos
		}
		if !f.opened {
			from := min(f.req.From, frame.From)
			if err := f.say(stream.Open(f.req.JobID, from, page.Header.Seq, page.Header.Seq, page.Header.Ended)); err != nil {
				return false, err
			}
			f.opened = true
		}
		if frame.Kind == store.FrameEnd {
			held := frame
			f.heldEnd = &held
			f.next = frame.N + 1
			break
		}
		sealed := sealFrame(frame)
		if err := f.emit(seal.Event{Sealed: &sealed}); err != nil {
			return false, err
		}
		f.pos, f.next, said = frame.Seq, frame.N+1, true
	}
	if said {
		if err := f.say(stream.Durable(f.pos)); err != nil {
			return false, err
		}
	}
	return said, nil
}

// sendEnd sends the held end, after an `open` at it when nothing was sent
// before.
func (f *follower) sendEnd() error {
	if !f.opened {
		if err := f.say(stream.Open(f.req.JobID, min(f.req.From, f.heldEnd.From), f.heldEnd.Seq, f.heldEnd.Seq, true)); err != nil {
			return err
		}
	}
	sealed := sealFrame(*f.heldEnd)
	return f.emit(seal.Event{Sealed: &sealed})
}

// sweepStreams is the scheduled sweep's stream half: streams whose lease
// lapsed are marked interrupted, so their readers end stale instead of
// waiting on a tail that will never move (rindle's "streaming forever"
// sweeper).
func (r *Relay) sweepStreams(ctx context.Context) error {
	l, ok := r.streamLog()
	if !ok {
		return nil
	}
	n, err := l.SweepStreams(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "streams interrupted", slog.Int("count", n))
	}
	return nil
}
