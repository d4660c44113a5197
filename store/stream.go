package store

import "context"

// StreamLog is the relay's log of live-stream frames (docs/streaming.md, a
// proposed extension beside the v2 endpoints): opaque sealed frames the
// holder of a job's current lease appends, and a site replays from any
// offset. The relay checks counters only; the text is sealed end to end.
//
// What an implementation must guarantee:
//  1. Fenced by the lease: a frame is appended only under the job's current,
//     unexpired lease, by its holder, while the job is ready or running, in
//     the same atomic step as the append (a daemon whose lease lapsed must
//     not add one frame after a new holder started).
//  2. Contiguous: frame N is appended only when the stream's next counter
//     is N and its committed length is the frame's From, as one
//     compare-and-set; a gap or a reorder is refused (RefusedOutOfOrder).
//  3. Replays deduplicated: a frame whose counter is already stored is
//     answered Duplicate when its offsets and kind match, and changes
//     nothing; a different frame under a stored counter is RefusedOutOfOrder.
//  4. Exactly one terminal: after the end frame nothing is appended.
//  5. A stream belongs to one lease: a re-claimed job streams afresh under
//     its new lease (the site's key differs per lease too).
//  6. Frames live no longer than their job.
type StreamLog interface {
	// AppendFrame appends one frame. Refusals, in order: RefusedNotFound,
	// RefusedNotHolder (grant resolution as for Complete), RefusedStaleLease
	// (not the job's current lease); then a stored counter is answered
	// Duplicate or RefusedOutOfOrder (guarantee 3) whatever the job's state,
	// since a retry after a lost acknowledgement must learn it landed; then
	// RefusedTerminal (the job is not ready or running, or the stream has
	// ended), RefusedStaleLease (the lease expired, even before a sweep
	// reached it), RefusedOutOfOrder (guarantee 2).
	AppendFrame(ctx context.Context, in AppendFrameInput) (AppendFrameResult, error)
	// StreamOf finds the live stream of a site's job: the job's state and
	// its current (or, once done, its finishing) lease. false when the job
	// is absent or has no holder: there is nothing live to attach to.
	StreamOf(ctx context.Context, siteID, jobID string) (StreamRef, bool, error)
	// ReadFrames reads the stream of (site, job, lease): its header (nil
	// before the first frame) and, in offset order, its frames whose Seq is
	// at least from, at most max of them (max <= 0: a store default).
	ReadFrames(ctx context.Context, siteID, jobID, leaseID string, from int64, max int) (StreamPage, error)
	// SweepStreams marks interrupted every stream that has not ended and
	// whose lease is no longer live (the job requeued, finished without an
	// end, was deleted, or its lease expired), and forgets streams whose job
	// is gone. It returns how many it marked.
	SweepStreams(ctx context.Context) (int, error)
}

// Stream frame kinds, as the daemon seals them.
const (
	FrameChunk = "chunk"
	FrameEnd   = "end"
)

// RefusedOutOfOrder: a frame that is not the stream's next (a gap, a
// reorder, a rewritten counter).
const RefusedOutOfOrder Refusal = "out-of-order"

// StreamFrame is one sealed frame: the counters the relay checks and the
// ciphertext it cannot read. Its shape (kinds, offsets, size) is checked
// where it is decoded (internal/stream/seal), before any store sees it.
type StreamFrame struct {
	N    int64
	From int64
	Seq  int64
	Kind string
	CT   string
}

// SameFrame reports whether stored is the frame in again: the same counter,
// offsets and kind. The ciphertext is not compared: a daemon that re-seals
// a retried frame draws a fresh nonce, and what the relay dedups on is the
// counters it checks.
func SameFrame(stored, in StreamFrame) bool {
	return stored.N == in.N && stored.From == in.From && stored.Seq == in.Seq && stored.Kind == in.Kind
}

// AppendFrameInput is a holder appending a frame under its grant.
type AppendFrameInput struct {
	JobID    string
	RunnerID string
	LeaseID  string
	Frame    StreamFrame
	// Interrupted: the daemon says, in clear, that this end frame seals
	// `interrupted`; recorded on the header with the end
	// (StreamHeader.EndInterrupted). Only with an end frame.
	Interrupted bool
}

// AppendFrameResult is AppendFrame's answer. Seq and N are the stream's
// committed length and next counter after the call, what the store
// confirmed (never what the caller assumed); Cancelled tells the producer
// the site cancelled the job.
type AppendFrameResult struct {
	Refused   Refusal
	Duplicate bool
	Seq       int64
	N         int64
	Cancelled bool
}

// StreamRef is a job's live stream as the site plane sees it.
type StreamRef struct {
	State   State
	LeaseID string
	// Live: the lease is current and unexpired and the job ready or running,
	// so more frames may come.
	Live bool
	// Done: the job's result is stored; an ended stream may now say `end`.
	Done bool
}

// StreamHeader is a stream's committed state.
type StreamHeader struct {
	Seq         int64 // committed length
	N           int64 // next counter
	Ended       bool  // the end frame is stored
	Interrupted bool  // marked by the sweep: the lease lapsed before the end
	// EndInterrupted: the stored end frame is the daemon's `interrupted`
	// end (AppendFrameInput.Interrupted), which readers are given without
	// waiting for a result that will not come from this lease.
	EndInterrupted bool
}

// StreamPage is one read of a stream.
type StreamPage struct {
	Header *StreamHeader
	Frames []StreamFrame
	// More: frames past the last returned may exist; read again from its Seq.
	More bool
}
