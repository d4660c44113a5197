package memory

import (
	"context"
	"sort"

	"github.com/byorelay/byorelay/store"
)

var _ store.StreamLog = (*Store)(nil)

// streamKey is one lease's stream of one site's job.
type streamKey struct{ siteID, jobID, leaseID string }

type memStream struct {
	header store.StreamHeader
	frames []store.StreamFrame // in counter order, which is offset order
}

// AppendFrame implements store.StreamLog.
func (s *Store) AppendFrame(ctx context.Context, in store.AppendFrameInput) (store.AppendFrameResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, refused := s.holderRefusal(in.JobID, in.RunnerID, in.LeaseID)
	if refused != "" {
		return store.AppendFrameResult{Refused: refused}, nil
	}
	if job.ClaimedBy.LeaseID != in.LeaseID {
		return store.AppendFrameResult{Refused: store.RefusedStaleLease}, nil
	}
	key := streamKey{job.SiteID, job.ID, in.LeaseID}
	st := s.streams[key]
	answer := func(r store.Refusal, dup bool) store.AppendFrameResult {
		out := store.AppendFrameResult{Refused: r, Duplicate: dup, Cancelled: job.Cancelled}
		if st != nil {
			out.Seq, out.N = st.header.Seq, st.header.N
		}
		return out
	}
	// A stored counter first, whatever the job's state: the end frame's
	// retry may arrive after the result it preceded.
	if st != nil && in.Frame.N < st.header.N {
		if store.SameFrame(st.frames[in.Frame.N], in.Frame) {
			return answer("", true), nil
		}
		return answer(store.RefusedOutOfOrder, false), nil
	}
	now := s.now()
	switch {
	case job.State != store.StateReady && job.State != store.StateRunning,
		st != nil && (st.header.Ended || st.header.Interrupted):
		return answer(store.RefusedTerminal, false), nil
	case job.ClaimedBy.LeaseExpiresAt <= now || job.Stub.DeadlineAt <= now:
		return answer(store.RefusedStaleLease, false), nil
	}
	var next, seq int64
	if st != nil {
		next, seq = st.header.N, st.header.Seq
	}
	if in.Frame.N != next || in.Frame.From != seq {
		return answer(store.RefusedOutOfOrder, false), nil
	}
	if st == nil {
		if s.streams == nil {
			s.streams = map[streamKey]*memStream{}
		}
		st = &memStream{}
		s.streams[key] = st
	}
	st.frames = append(st.frames, in.Frame)
	st.header.N++
	st.header.Seq = in.Frame.Seq
	st.header.Ended = in.Frame.Kind == store.FrameEnd
	st.header.EndInterrupted = st.header.Ended && in.Interrupted
	return answer("", false), nil
}

// StreamOf implements store.StreamLog.
func (s *Store) StreamOf(ctx context.Context, siteID, jobID string) (store.StreamRef, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, ok := s.jobs[jobKey{siteID, jobID}]
	now := s.now()
	if !ok || job.ClaimedBy == nil || job.Stub.DeadlineAt <= now {
		return store.StreamRef{}, false, nil
	}
	return store.StreamRef{
		State:   job.State,
		LeaseID: job.ClaimedBy.LeaseID,
		Live:    (job.State == store.StateReady || job.State == store.StateRunning) && job.ClaimedBy.LeaseExpiresAt > now,
		Done:    job.State == store.StateDone && job.Result != nil,
	}, true, nil
}

// ReadFrames implements store.StreamLog.
func (s *Store) ReadFrames(ctx context.Context, siteID, jobID, leaseID string, from int64, max int) (store.StreamPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := streamKey{siteID, jobID, leaseID}
	st := s.streams[key]
	if st == nil {
		return store.StreamPage{}, nil
	}
	if job, ok := s.jobs[jobKey{siteID, jobID}]; !ok || job.Stub.DeadlineAt <= s.now() {
		// Frames live no longer than their job.
		delete(s.streams, key)
		return store.StreamPage{}, nil
	}
	if max <= 0 {
		max = defaultFramePage
	}
	header := st.header
	page := store.StreamPage{Header: &header}
	i := sort.Search(len(st.frames), func(i int) bool { return st.frames[i].Seq >= from })
	for ; i < len(st.frames) && len(page.Frames) < max; i++ {
		page.Frames = append(page.Frames, st.frames[i])
	}
	page.More = i < len(st.frames)
	return page, nil
}

// defaultFramePage is ReadFrames' page when the caller names none.
const defaultFramePage = 256

// SweepStreams implements store.StreamLog.
func (s *Store) SweepStreams(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	marked := 0
	for key, st := range s.streams {
		job, ok := s.jobs[jobKey{key.siteID, key.jobID}]
		if !ok || job.Stub.DeadlineAt <= now {
			delete(s.streams, key)
			continue
		}
		if st.header.Ended || st.header.Interrupted {
			continue
		}
		live := job.ClaimedBy != nil && job.ClaimedBy.LeaseID == key.leaseID &&
			(job.State == store.StateReady || job.State == store.StateRunning) &&
			job.ClaimedBy.LeaseExpiresAt > now
		if !live {
			st.header.Interrupted = true
			marked++
		}
	}
	return marked, nil
}
