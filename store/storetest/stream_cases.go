package storetest

import (
	"fmt"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// RunStreams runs the store.StreamLog cases. Separate from Run because the
// frame log is an extension (docs/streaming.md); every store that serves
// streams passes both. h.New must return a store that implements store.StreamLog.
func RunStreams(t *testing.T, h Harness) {
	for _, c := range append(streamCases, streamClaimCases...) {
		t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, h)) })
	}
}

func (e *env) log() store.StreamLog {
	e.Helper()
	l, ok := e.s.(store.StreamLog)
	if !ok {
		e.Fatalf("%T does not implement store.StreamLog", e.s)
	}
	return l
}

// frame is frame n covering [from, seq) (an end when from == seq).
func frame(n, from, seq int64) store.StreamFrame {
	kind := store.FrameChunk
	if from == seq {
		kind = store.FrameEnd
	}
	return store.StreamFrame{N: n, From: from, Seq: seq, Kind: kind, CT: "ct-" + string(rune('a'+n))}
}

func (e *env) appendFrame(g store.Claimed, runnerID string, f store.StreamFrame) store.AppendFrameResult {
	e.Helper()
	r, err := e.log().AppendFrame(e.ctx, store.AppendFrameInput{JobID: g.ID, RunnerID: runnerID, LeaseID: g.Lease.ID, Frame: f})
	e.check(err)
	return r
}

func (e *env) frames(jobID, leaseID string, from int64, max int) store.StreamPage {
	e.Helper()
	p, err := e.log().ReadFrames(e.ctx, site, jobID, leaseID, from, max)
	e.check(err)
	return p
}

// running is job id claimed by runner_1, sealed and fetched.
func (e *env) running(id string) store.Claimed {
	e.Helper()
	e.enqueue(site, stub(id, "alice"))
	g := e.claimOne(claimArgs(), id)
	e.seal(id)
	e.take(id, "runner_1", g.Lease.ID)
	return g
}

var streamCases = []testCase{
	{"appends contiguous frames and reads them back from any offset", func(e *env) {
		g := e.running("a")
		e.same("frame 0", e.appendFrame(g, "runner_1", frame(0, 0, 5)), store.AppendFrameResult{Seq: 5, N: 1})
		e.same("frame 1", e.appendFrame(g, "runner_1", frame(1, 5, 9)), store.AppendFrameResult{Seq: 9, N: 2})
		e.same("frame 2", e.appendFrame(g, "runner_1", frame(2, 9, 12)), store.AppendFrameResult{Seq: 12, N: 3})
		e.same("from 0", e.frames("a", g.Lease.ID, 0, 0), store.StreamPage{
			Header: &store.StreamHeader{Seq: 12, N: 3},
			Frames: []store.StreamFrame{frame(0, 0, 5), frame(1, 5, 9), frame(2, 9, 12)},
		})
		// From 7: the frame that contains offset 7 first.
		e.same("from 7", e.frames("a", g.Lease.ID, 7, 0).Frames, []store.StreamFrame{frame(1, 5, 9), frame(2, 9, 12)})
		e.same("from 9 keeps the frame ending there", e.frames("a", g.Lease.ID, 9, 0).Frames, []store.StreamFrame{frame(1, 5, 9), frame(2, 9, 12)})
		e.same("a page of one", e.frames("a", g.Lease.ID, 0, 1), store.StreamPage{
			Header: &store.StreamHeader{Seq: 12, N: 3}, Frames: []store.StreamFrame{frame(0, 0, 5)}, More: true,
		})
		e.same("past the end", e.frames("a", g.Lease.ID, 13, 0), store.StreamPage{Header: &store.StreamHeader{Seq: 12, N: 3}})
	}},

	{"refuses a gap, a reorder and a frame that does not start where the stream ends", func(e *env) {
		g := e.running("a")
		e.same("frame 1 first", e.appendFrame(g, "runner_1", frame(1, 0, 5)), store.AppendFrameResult{Refused: store.RefusedOutOfOrder})
		e.same("frame 0 not from 0", e.appendFrame(g, "runner_1", frame(0, 2, 5)), store.AppendFrameResult{Refused: store.RefusedOutOfOrder})
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.same("a gap in counters", e.appendFrame(g, "runner_1", frame(2, 5, 9)), store.AppendFrameResult{Refused: store.RefusedOutOfOrder, Seq: 5, N: 1})
		e.same("a gap in offsets", e.appendFrame(g, "runner_1", frame(1, 6, 9)), store.AppendFrameResult{Refused: store.RefusedOutOfOrder, Seq: 5, N: 1})
		e.same("nothing was written", e.frames("a", g.Lease.ID, 0, 0).Frames, []store.StreamFrame{frame(0, 0, 5)})
	}},

	{"answers a replayed frame as a duplicate and a rewritten one as out of order", func(e *env) {
		g := e.running("a")
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.appendFrame(g, "runner_1", frame(1, 5, 9))
		resealed := frame(0, 0, 5)
		resealed.CT = "fresh nonce"
		e.same("a retry", e.appendFrame(g, "runner_1", resealed), store.AppendFrameResult{Duplicate: true, Seq: 9, N: 2})
		e.same("a different frame 0", e.appendFrame(g, "runner_1", frame(0, 0, 4)), store.AppendFrameResult{Refused: store.RefusedOutOfOrder, Seq: 9, N: 2})
		e.same("still two frames", len(e.frames("a", g.Lease.ID, 0, 0).Frames), 2)
	}},

	{"takes exactly one terminal and keeps answering its retry after the result", func(e *env) {
		g := e.running("a")
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.same("end", e.appendFrame(g, "runner_1", frame(1, 5, 5)), store.AppendFrameResult{Seq: 5, N: 2})
		e.same("a chunk after the end", e.appendFrame(g, "runner_1", frame(2, 5, 7)), store.AppendFrameResult{Refused: store.RefusedTerminal, Seq: 5, N: 2})
		e.same("a second end", e.appendFrame(g, "runner_1", frame(2, 5, 5)), store.AppendFrameResult{Refused: store.RefusedTerminal, Seq: 5, N: 2})
		e.complete("a", "runner_1", g.Lease.ID, "result", store.DispositionOK)
		e.same("the end retried after the result", e.appendFrame(g, "runner_1", frame(1, 5, 5)), store.AppendFrameResult{Duplicate: true, Seq: 5, N: 2})
		e.same("header", e.frames("a", g.Lease.ID, 0, 0).Header, &store.StreamHeader{Seq: 5, N: 2, Ended: true})
	}},

	{"records an end said interrupted on the header, as a first frame and after chunks", func(e *env) {
		interrupted := func(g store.Claimed, f store.StreamFrame) store.AppendFrameResult {
			e.Helper()
			r, err := e.log().AppendFrame(e.ctx, store.AppendFrameInput{JobID: g.ID, RunnerID: "runner_1", LeaseID: g.Lease.ID, Frame: f, Interrupted: true})
			e.check(err)
			return r
		}
		g := e.running("a")
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.same("the end", interrupted(g, frame(1, 5, 5)), store.AppendFrameResult{Seq: 5, N: 2})
		e.same("header", e.frames("a", g.Lease.ID, 0, 0).Header, &store.StreamHeader{Seq: 5, N: 2, Ended: true, EndInterrupted: true})
		e.same("its retry", interrupted(g, frame(1, 5, 5)), store.AppendFrameResult{Duplicate: true, Seq: 5, N: 2})

		b := e.running("b")
		e.same("an end as the first frame", interrupted(b, frame(0, 0, 0)), store.AppendFrameResult{Seq: 0, N: 1})
		e.same("its header", e.frames("b", b.Lease.ID, 0, 0).Header, &store.StreamHeader{Seq: 0, N: 1, Ended: true, EndInterrupted: true})
	}},

	{"is fenced by the job's current lease", func(e *env) {
		g := e.running("a")
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.same("another runner", e.appendFrame(g, "runner_2", frame(1, 5, 9)), store.AppendFrameResult{Refused: store.RefusedNotHolder})
		stale := g
		stale.Lease.ID = "an-older-lease"
		e.same("another lease of the holder", e.appendFrame(stale, "runner_1", frame(1, 5, 9)), store.AppendFrameResult{Refused: store.RefusedStaleLease})
		e.advance(60_001)
		e.same("a lapsed lease no sweep has reached", e.appendFrame(g, "runner_1", frame(1, 5, 9)), store.AppendFrameResult{Refused: store.RefusedStaleLease, Seq: 5, N: 1})
	}},

	{"refuses frames before the payload was fetched and after the job finished", func(e *env) {
		e.enqueue(site, stub("a", "alice"))
		g := e.claimOne(claimArgs(), "a")
		e.same("awaiting payload", e.appendFrame(g, "runner_1", frame(0, 0, 5)), store.AppendFrameResult{Refused: store.RefusedTerminal})
		e.seal("a")
		e.same("ready", e.appendFrame(g, "runner_1", frame(0, 0, 5)), store.AppendFrameResult{Seq: 5, N: 1})
		e.complete("a", "runner_1", g.Lease.ID, "result", store.DispositionOK)
		e.same("done", e.appendFrame(g, "runner_1", frame(1, 5, 9)), store.AppendFrameResult{Refused: store.RefusedTerminal, Seq: 5, N: 1})
	}},

	{"tells the producer the site cancelled", func(e *env) {
		g := e.running("a")
		_, err := e.s.Cancel(e.ctx, site, "a")
		e.check(err)
		e.same("append", e.appendFrame(g, "runner_1", frame(0, 0, 5)), store.AppendFrameResult{Seq: 5, N: 1, Cancelled: true})
	}},

	{"finds a job's stream by its current or finishing lease and nothing else", func(e *env) {
		l := e.log()
		_, ok, err := l.StreamOf(e.ctx, site, "a")
		e.check(err)
		e.same("no job", ok, false)
		e.enqueue(site, stub("a", "alice"))
		_, ok, _ = l.StreamOf(e.ctx, site, "a")
		e.same("queued", ok, false)
		g := e.claimOne(claimArgs(), "a")
		e.seal("a")
		ref, ok, _ := l.StreamOf(e.ctx, site, "a")
		e.same("ready", ref, store.StreamRef{State: store.StateReady, LeaseID: g.Lease.ID, Live: true})
		e.same("found", ok, true)
		_, ok, _ = l.StreamOf(e.ctx, "another_site", "a")
		e.same("another site's view", ok, false)
		e.complete("a", "runner_1", g.Lease.ID, "result", store.DispositionOK)
		ref, _, _ = l.StreamOf(e.ctx, site, "a")
		e.same("done", ref, store.StreamRef{State: store.StateDone, LeaseID: g.Lease.ID, Done: true})
	}},

	{"streams afresh under a new lease after a requeue", func(e *env) {
		old := e.running("a")
		e.appendFrame(old, "runner_1", frame(0, 0, 5))
		e.release("runner_1", store.ReleaseShutdown, 0, protocol.GrantRef{JobID: "a", LeaseID: old.Lease.ID})
		current := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.same("frame 0 under the new lease", e.appendFrame(current, "runner_1", frame(0, 0, 3)), store.AppendFrameResult{Seq: 3, N: 1})
		e.same("the new stream", e.frames("a", current.Lease.ID, 0, 0).Frames, []store.StreamFrame{frame(0, 0, 3)})
	}},

	{"the sweep marks a stream whose lease lapsed interrupted, not one that ended", func(e *env) {
		a := e.running("a")
		b := e.running("b")
		e.appendFrame(a, "runner_1", frame(0, 0, 5))
		e.appendFrame(b, "runner_1", frame(0, 0, 5))
		e.appendFrame(b, "runner_1", frame(1, 5, 5))
		n, err := e.log().SweepStreams(e.ctx)
		e.check(err)
		e.same("nothing lapsed yet", n, 0)
		e.advance(60_001)
		n, err = e.log().SweepStreams(e.ctx)
		e.check(err)
		e.same("marked", n, 1)
		e.same("a", e.frames("a", a.Lease.ID, 0, 0).Header, &store.StreamHeader{Seq: 5, N: 1, Interrupted: true})
		e.same("b", e.frames("b", b.Lease.ID, 0, 0).Header, &store.StreamHeader{Seq: 5, N: 2, Ended: true})
		n, _ = e.log().SweepStreams(e.ctx)
		e.same("once", n, 0)
	}},

	{"frames live no longer than their job", func(e *env) {
		e.enqueue(site, protocol.JobStub{ID: "a", Kind: "llm.generate", Owner: "alice", Site: siteKeyID, Audience: "private", SizeClass: "small", DeadlineAt: clock.EpochMs(Start) + 30_000})
		g := e.claimOne(claimArgs(), "a")
		e.seal("a")
		e.appendFrame(g, "runner_1", frame(0, 0, 5))
		e.advance(30_000)
		e.same("past the deadline", e.frames("a", g.Lease.ID, 0, 0), store.StreamPage{})
		_, ok, _ := e.log().StreamOf(e.ctx, site, "a")
		e.same("no stream", ok, false)
		e.sweep()
		_, err := e.log().SweepStreams(e.ctx)
		e.check(err)
		e.same("after the sweeps", e.frames("a", g.Lease.ID, 0, 0), store.StreamPage{})
	}},
}

func streamingStub(id string) protocol.JobStub {
	s := stub(id, "alice")
	s.Streaming = true
	s.SizeClass = "unbounded"
	return s
}

var streamClaimCases = []testCase{
	{"offers a streaming stub only to a device that opted in", func(e *env) {
		e.enqueue(site, streamingStub("live"))
		e.enqueue(site, stub("plain", "alice"))
		e.same("a device that does not stream", ids(e.claim(claimArgs())), []string{"plain"})
		in := asRunner("runner_2")
		in.Streams = true
		e.same("a device that streams", ids(e.claim(in)), []string{"live"})
	}}, {"a device that does not stream reaches plain jobs queued behind many streaming ones", func(e *env) {
		// More streaming jobs ahead than any bounded read of one queue
		// partition takes: they must not hide the plain job from a device
		// that may not have them.
		for i := range 40 {
			e.enqueue(site, streamingStub(fmt.Sprintf("live-%02d", i)))
		}
		e.enqueue(site, stub("plain", "alice"))
		e.same("a device that does not stream", ids(e.claim(claimArgs())), []string{"plain"})
		in := asRunner("runner_2")
		in.Streams = true
		// One: the plain grant, unsealed, holds the pair's other slot.
		e.same("a device that streams, oldest first", ids(e.claim(in)), []string{"live-00"})
	}},
	{"a device that streams takes plain and streaming jobs in enqueue order", func(e *env) {
		e.enqueue(site, stub("first", "alice"))
		e.enqueue(site, streamingStub("second"))
		e.enqueue(site, stub("third", "alice"))
		in := claimArgs()
		in.Streams = true
		in.Max = 1
		e.same("first claim", ids(e.claim(in)), []string{"first"})
		in.RunnerID, in.Device = "runner_2", device("runner_2")
		e.same("second claim", ids(e.claim(in)), []string{"second"})
	}},
}
