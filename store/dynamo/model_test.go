package dynamo

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/byorelay/byorelay/store"
)

// The sequential model the concurrency test checks histories against: the
// memory store's rules (store/memory), restated for one job.
// Histories are partitioned by job: every operation the workload issues
// names one job, and a multi-job operation (a claim, a sweep) is recorded
// as one sub-operation per job it reported, over the same interval. The
// one rule that couples jobs, the per-pair unsealed cap, is checked on
// consistent snapshots instead (see TestConcurrentReplicasStayLinearizable).

type opKind int

const (
	opGrant opKind = iota
	opSeal
	opTake
	opComplete
	opRelease
	opRenew
	opCancel
	opSweep
	opEnqueue
)

var opNames = [...]string{"grant", "seal", "take", "complete", "release", "renew", "cancel", "sweep", "enqueue"}

type mInput struct {
	kind    opKind
	job     int
	runner  int
	owner   string // the device's owner (grant)
	lease   string
	now     int64
	leaseMs int64
	// release
	reason     store.ReleaseReason
	retryAfter int64
	// complete
	cipher string
}

type mOutput struct {
	// grant: the lease granted; renew: the new expiry
	lease     string
	expiresAt int64
	// seal
	state store.State
	was   store.State
	// holder calls
	refused   store.Refusal
	ok        bool // take: got an envelope; release: released; renew: renewed; cancel: true
	accepted  bool
	duplicate bool
	// sweep
	removed bool
	// unknown: the call returned an error, so whether it took effect is
	// not known (a lost acknowledgement, or a retryable failure).
	unknown bool
}

// jobModel is one job. Comparable, so porcupine can cache states.
type jobModel struct {
	exists        bool
	state         store.State
	runner        int
	lease         string
	leaseExp      int64
	awaitingUntil int64
	sealAttempts  int
	reofferTo     int
	refused       uint32
	retryAfter    [maxRunners]int64
	cancelled     bool
	payload       bool
	result        string
	// static
	owner    string
	private  bool
	deadline int64
}

const maxRunners = 8

func (m jobModel) claimed() bool { return m.lease != "" }

// lapsed is the store's rule (store/memory's lapsed): the job is due for a
// sweep at the first of its deadline, its awaiting window and its lease.
func (m jobModel) lapsed(now int64) bool {
	due := m.deadline
	switch {
	case m.state == store.StateAwaitingPayload:
		due = min(due, m.awaitingUntil)
	case m.claimed() && (m.state == store.StateReady || m.state == store.StateRunning):
		due = min(due, m.leaseExp)
	}
	return due <= now
}

func (m *jobModel) requeue() {
	m.state = store.StateQueued
	m.runner, m.lease, m.leaseExp, m.awaitingUntil, m.payload = -1, "", 0, 0, false
}

// resolves is grantFor for one job: the exact grant, or this runner's hold
// under another lease.
func (m jobModel) resolves(runner int, lease string) bool {
	if !m.exists || !m.claimed() {
		return false
	}
	return m.lease == lease || m.runner == runner
}

func stepJob(s jobModel, in mInput, out mOutput, w *workload) (bool, jobModel) {
	// A finished job is gone from its deadline on, swept or not (it
	// expires, and no sweep reports it).
	if s.exists && s.state == store.StateDone && s.deadline <= in.now {
		s.exists = false
	}
	switch in.kind {
	case opGrant:
		r := w.runners[in.runner]
		ok := s.exists && s.state == store.StateQueued && !s.cancelled &&
			(s.reofferTo < 0 || s.reofferTo == in.runner) &&
			s.refused&(1<<in.runner) == 0 && s.retryAfter[in.runner] <= in.now &&
			(!s.private || s.owner == r.owner) && r.routes[s.owner] &&
			out.expiresAt == in.now+in.leaseMs
		if !ok {
			return false, s
		}
		s.state, s.runner, s.lease = store.StateAwaitingPayload, in.runner, out.lease
		s.leaseExp, s.awaitingUntil = out.expiresAt, in.now+store.AwaitingPayloadMs
		return true, s

	case opSeal:
		if !s.exists {
			return out.refused == store.RefusedNotFound, s
		}
		if s.state != store.StateAwaitingPayload {
			return out.refused == store.RefusedTooLate && out.was == s.state, s
		}
		if out.refused != "" || out.state != store.StateReady {
			return false, s
		}
		s.state, s.payload, s.awaitingUntil, s.sealAttempts = store.StateReady, true, 0, 0
		return true, s

	case opTake:
		want := store.Refusal("")
		switch {
		case !s.resolves(in.runner, in.lease):
			want = store.RefusedNotFound
		case s.runner != in.runner:
			want = store.RefusedNotHolder
		case s.lease != in.lease:
			want = store.RefusedStaleLease
		case !s.payload:
			want = store.RefusedNotReady
		case s.state != store.StateReady && s.state != store.StateRunning:
			want = store.RefusedTerminal
		}
		if want != "" {
			return out.refused == want && !out.ok, s
		}
		if !out.ok || out.refused != "" {
			return false, s
		}
		s.state = store.StateRunning
		return true, s

	case opComplete:
		want := store.Refusal("")
		switch {
		case !s.resolves(in.runner, in.lease):
			want = store.RefusedNotFound
		case s.runner != in.runner:
			want = store.RefusedNotHolder
		case s.state == store.StateDone:
			if s.lease == in.lease {
				return out.refused == "" && !out.accepted && out.duplicate && out.state == store.StateDone, s
			}
			want = store.RefusedStaleLease
		case s.lease != in.lease:
			want = store.RefusedStaleLease
		}
		if want != "" {
			return out.refused == want, s
		}
		if !out.accepted || out.duplicate || out.refused != "" {
			return false, s
		}
		s.state, s.result = store.StateDone, in.cipher
		return true, s

	case opRelease:
		held := s.exists && s.claimed() && s.runner == in.runner && s.lease == in.lease && s.state != store.StateDone
		if !held {
			return !out.ok, s
		}
		if !out.ok {
			return false, s
		}
		if in.reason == store.ReleaseRefused {
			s.refused |= 1 << in.runner
		}
		if in.retryAfter != 0 {
			s.retryAfter[in.runner] = in.retryAfter
		}
		s.requeue()
		return true, s

	case opRenew:
		held := s.exists && s.claimed() && s.runner == in.runner && s.lease == in.lease
		// A grant a sweep would end is lost, swept yet or not: in-line
		// sweeps are bounded, so renewing it would bring it back to life.
		if !held || s.lapsed(in.now) {
			return !out.ok, s
		}
		if !out.ok || out.expiresAt != in.now+in.leaseMs {
			return false, s
		}
		s.leaseExp = out.expiresAt
		return true, s

	case opCancel:
		if !s.exists {
			return !out.ok, s
		}
		s.cancelled = true
		return out.ok, s

	case opEnqueue:
		if !s.exists {
			s = w.initial(in.job)
			s.exists = true
		}
		return out.state == s.state, s

	case opSweep:
		if !s.exists {
			return false, s
		}
		switch {
		case s.deadline <= in.now:
			s.exists = false
			return out.removed, s
		case s.state == store.StateAwaitingPayload && s.awaitingUntil <= in.now:
			if s.reofferTo < 0 {
				s.reofferTo = s.runner
			}
			if s.sealAttempts+1 >= store.SealAttemptsBeforeEviction {
				s.exists = false
				return out.removed, s
			}
			s.sealAttempts++
			s.requeue()
			return !out.removed, s
		case (s.state == store.StateReady || s.state == store.StateRunning) && s.claimed() && s.leaseExp <= in.now:
			s.requeue()
			return !out.removed, s
		}
		return false, s
	}
	return false, s
}

// effects are the outputs an operation that took effect could have
// returned; an operation whose outcome is unknown either took one of them or
// did nothing.
func effects(in mInput) []mOutput {
	switch in.kind {
	case opSeal:
		return []mOutput{{state: store.StateReady}}
	case opTake, opRelease, opCancel:
		return []mOutput{{ok: true}}
	case opComplete:
		return []mOutput{{accepted: true, state: store.StateDone}}
	case opRenew:
		return []mOutput{{ok: true, expiresAt: in.now + in.leaseMs}}
	case opSweep:
		return []mOutput{{removed: true}, {removed: false}}
	case opEnqueue:
		return []mOutput{{state: store.StateQueued}}
	}
	return nil
}

// model is the porcupine model over the workload's jobs.
func (w *workload) model() porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byJob := make([][]porcupine.Operation, len(w.jobs))
			for _, op := range history {
				j := op.Input.(mInput).job
				byJob[j] = append(byJob[j], op)
			}
			return byJob
		},
		// Init cannot know which partition it starts, so the state is the
		// job index plus the model, and the first step of a partition
		// adopts its job's initial state.
		Init: func() []interface{} { return []interface{}{jobModel{runner: -2}} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(jobModel)
			in, out := input.(mInput), output.(mOutput)
			if s.runner == -2 {
				s = w.initial(in.job)
			}
			if !out.unknown {
				if ok, next := stepJob(s, in, out, w); ok {
					return []interface{}{next}
				}
				return nil
			}
			next := []interface{}{s}
			for _, o := range effects(in) {
				if ok, n := stepJob(s, in, o, w); ok && n != s {
					next = append(next, n)
				}
			}
			return next
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(mInput), output.(mOutput)
			return fmt.Sprintf("%s job%d r%d lease=%s now=%d -> %+v", opNames[in.kind], in.job, in.runner, in.lease, in.now, out)
		},
	}).ToModel()
}
