package siteserver

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/sitestore"
)

// StreamWaitNotice is how long a cloud-lane job published as a live stream
// may wait with no device claiming it before the site says why (Waiting,
// and one warning in the log). The relay offers a streaming job only to a
// device that opts in to streams, and a byollm 0.1.1 daemon never does, so
// a site whose people run one would otherwise watch such a job sit queued
// with nothing said anywhere. Ten seconds is several claim rounds of any
// daemon polling for work, well past a claim that is merely slow.
const StreamWaitNotice = 10 * time.Second

// Reasons a live job has not started, as Waiting gives them.
const (
	// WaitingForDependencies: a dependency has not completed ok. A job
	// whose dependency ended otherwise waits here until its deadline
	// expires it, on either lane.
	WaitingForDependencies = "waiting for its dependencies to complete ok"
	// WaitingForStreamingDevice: a cloud-lane job published as a live
	// stream that no device has claimed for StreamWaitNotice.
	WaitingForStreamingDevice = "published as a live stream, and no device that streams has claimed it: " +
		"the relay offers a streaming job only to a daemon that opts in (byorelay daemon does by default; " +
		"a byollm 0.1.1 daemon never does); publish it whole for any daemon"
)

// Waiting says why a live job has not started, "" when nothing known holds
// it: a dependency it waits on, or, on the cloud lane, a live stream no
// device that streams has claimed for StreamWaitNotice.
func Waiting(j sitestore.Job, now int64) string {
	if j.State != sitestore.StateQueued {
		return ""
	}
	if j.ClaimableAt == 0 {
		return WaitingForDependencies
	}
	if j.Streaming && !j.AwaitingPublish && len(j.SealedTo) == 0 && now-j.ClaimableAt >= StreamWaitNotice.Milliseconds() {
		return WaitingForStreamingDevice
	}
	return ""
}

// streamWatch is this process's list of the streaming jobs it published
// and has not yet judged: each is looked at once, StreamWaitNotice after
// it became claimable, and dropped, so it holds at most the streaming jobs
// published in the last StreamWaitNotice (plus one pump interval). Only
// the warning in the log needs it; Waiting reads the store.
type streamWatch struct {
	mu   sync.Mutex
	jobs map[string]int64 // id -> when it became claimable, store ms
}

// watchStreaming notes a streaming job this process stored, to warn about
// once StreamWaitNotice has passed (noteWaiting). A job not yet published
// then (a dependency blocks it, or the relay has not accepted it) is
// looked at again one StreamWaitNotice later.
func (s *Server) watchStreaming(j sitestore.Job) {
	if !j.Streaming {
		return
	}
	since := j.ClaimableAt
	if since == 0 {
		since = j.CreatedAt
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if s.watch.jobs == nil {
		s.watch.jobs = map[string]int64{}
	}
	s.watch.jobs[j.ID] = since
}

// noteWaiting warns, once per job, about every watched streaming job that
// no device that streams has claimed in StreamWaitNotice.
func (s *Server) noteWaiting(ctx context.Context) {
	now, err := s.store.Now(ctx)
	if err != nil {
		return
	}
	var due []string
	s.watch.mu.Lock()
	for id, since := range s.watch.jobs {
		if now-since >= StreamWaitNotice.Milliseconds() {
			due = append(due, id)
			delete(s.watch.jobs, id)
		}
	}
	s.watch.mu.Unlock()
	for _, id := range due {
		j, found, err := s.store.Get(ctx, id)
		if err != nil || !found {
			continue
		}
		if j.State == sitestore.StateQueued && (j.ClaimableAt == 0 || j.AwaitingPublish) {
			s.watch.mu.Lock()
			s.watch.jobs[id] = now
			s.watch.mu.Unlock()
			continue
		}
		if why := Waiting(j, now); why == WaitingForStreamingDevice {
			s.log.LogAttrs(ctx, slog.LevelWarn, "job waits for a device that streams",
				slog.String("job", id), slog.String("waited", strconv.FormatInt((now-j.ClaimableAt)/1000, 10)+"s"),
				slog.String("reason", why))
		}
	}
}
