package site

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/byorelay/byorelay/protocol"
)

// Tracked is what a site keeps of one job it published.
type Tracked struct {
	Stub protocol.JobStub
	// AtRest is the payload sealed to the site's own key (direct-mode
	// jobs-at-rest encryption, which the cloud lane inherits): the
	// plaintext exists only for the moment of re-sealing to a device.
	AtRest protocol.SealedEnvelope
	// CreatedAt binds the deadline of every envelope sealed for the job
	// (CreatedAt + protocol.EnvelopeMaxAgeMs).
	CreatedAt int64
	// Published is set once the relay accepted the stub.
	Published bool
	// Cancelled: this site withdrew the job; nothing more is sealed for it.
	Cancelled bool
	// Ended is the job's fate once it has one ("" while it is live); a
	// result the relay re-serves after that is only collected.
	Ended Fate
	// SealedTo is every device this site handed the payload to. A result
	// is accepted only from one of them, whatever lease the relay recorded
	// it under.
	SealedTo []protocol.PublicIdentity
	// Result is the verified result's outcome once the ledger holds it
	// (nil until then, and for every fate but verified): StreamHandler
	// sends it after a stream that ended without its seal. A ledger that
	// does not keep results leaves it nil.
	Result *Outcome
	// Stream is the lease and device the job's live stream is keyed to:
	// the latest seal, recorded by Sealing in the same write as SealedTo.
	// A stream is read from it, so any process sharing a durable ledger
	// reads any of its jobs' streams. nil until the job is sealed.
	Stream *StreamGrant
}

// StreamGrant is what a job's live stream is keyed to (docs/streaming.md).
type StreamGrant struct {
	LeaseID string
	Device  protocol.PublicIdentity
}

// sealedToDevice reports whether the payload was sealed to device (both
// keys: the identity that signs and the key the payload went to).
func (t Tracked) sealedToDevice(device protocol.PublicIdentity) bool {
	return slices.Contains(t.SealedTo, device)
}

// Ledger is where a Client keeps its jobs. The default (a nil
// Config.Ledger) is process memory: kill the site and its jobs are
// forgotten. A durable ledger (siteserver's cloud lane keeps them in the
// site job store) makes a restarted site carry on: it publishes what the
// relay never accepted, seals for claims, and accepts results from the
// devices it sealed to before it died.
//
// The Client calls a ledger in a fixed order, which is what makes a
// restart safe: a job is tracked before its stub is posted, and a device is
// recorded in Sealing before the payload sealed to it is posted.
type Ledger interface {
	// Track records a job before the relay hears of it. Tracking again a
	// live job with the same stub changes nothing; with a different stub
	// it is an error. A ledger may refuse an id that already ended.
	Track(ctx context.Context, t Tracked) error
	// Untrack drops (or ends, for a ledger that never forgets) a job the
	// relay refused to queue.
	Untrack(ctx context.Context, jobID, reason string) error
	// Published records that the relay accepted the stub.
	Published(ctx context.Context, jobID string) error
	// Unpublished lists the live jobs whose stub the relay has not
	// accepted yet, oldest first.
	Unpublished(ctx context.Context) ([]Tracked, error)
	// Lookup reads one job; false if this ledger does not hold it.
	Lookup(ctx context.Context, jobID string) (Tracked, bool, error)
	// Sealing records, before the payload sealed to claim.Device leaves
	// the site, that it was sealed to it under claim.LeaseID, and that
	// grant as the job's Stream. A refusal
	// ("" if none) means: do not post it (the job ended or was cancelled
	// since it was looked up).
	Sealing(ctx context.Context, claim protocol.SitePendingJob) (refusal string, err error)
	// Cancelling marks the job withdrawn: no seal from now on.
	Cancelling(ctx context.Context, jobID string) error
	// End records the job's one ending; false if it had already ended (or
	// is unknown), in which case the ending is not reported again.
	End(ctx context.Context, e Ending) (bool, error)
	// Expire ends, as FateExpired, every live job whose deadline has
	// passed, and returns those endings.
	Expire(ctx context.Context, now int64) ([]Ending, error)
}

// memoryLedger is the default Ledger: process memory.
type memoryLedger struct {
	mu   sync.Mutex
	jobs map[string]*Tracked
}

func newMemoryLedger() *memoryLedger { return &memoryLedger{jobs: map[string]*Tracked{}} }

func (m *memoryLedger) Track(_ context.Context, t Tracked) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A job that already ended here is published anew: at the relay it is
	// gone (evicted, expired) or done, and either way this is a new job.
	if prev, ok := m.jobs[t.Stub.ID]; ok && prev.Ended == "" {
		if prev.Stub != t.Stub {
			return fmt.Errorf("site: job %s was already published with a different stub", t.Stub.ID)
		}
		return nil
	}
	t.SealedTo = slices.Clone(t.SealedTo)
	m.jobs[t.Stub.ID] = &t
	return nil
}

func (m *memoryLedger) Untrack(_ context.Context, jobID, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, jobID)
	return nil
}

func (m *memoryLedger) Published(_ context.Context, jobID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j, ok := m.jobs[jobID]; ok {
		j.Published = true
	}
	return nil
}

func (m *memoryLedger) Unpublished(context.Context) ([]Tracked, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Tracked
	for _, j := range m.jobs {
		if !j.Published && j.Ended == "" {
			out = append(out, copyTracked(*j))
		}
	}
	slices.SortFunc(out, func(a, b Tracked) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return out, nil
}

func (m *memoryLedger) Lookup(_ context.Context, jobID string) (Tracked, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[jobID]
	if !ok {
		return Tracked{}, false, nil
	}
	return copyTracked(*j), true, nil
}

func (m *memoryLedger) Sealing(_ context.Context, claim protocol.SitePendingJob) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[claim.JobID]
	if !ok {
		return "forgotten here; not sealing it", nil
	}
	if refusal := sealRefusal(*j); refusal != "" {
		return refusal, nil
	}
	if !j.sealedToDevice(*claim.Device) {
		j.SealedTo = append(j.SealedTo, *claim.Device)
	}
	j.Stream = &StreamGrant{LeaseID: claim.LeaseID, Device: *claim.Device}
	return "", nil
}

func (m *memoryLedger) Cancelling(_ context.Context, jobID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j, ok := m.jobs[jobID]; ok {
		j.Cancelled = true
	}
	return nil
}

func (m *memoryLedger) End(_ context.Context, e Ending) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[e.JobID]
	if !ok || j.Ended != "" {
		return false, nil
	}
	j.Ended = e.Fate
	if e.Fate == FateVerified && e.Result != nil {
		o := e.Result.Outcome
		j.Result = &o
	}
	return true, nil
}

// Expire ends what passed its deadline and forgets what had ended before
// it: past the deadline the relay has dropped the job too and nothing more
// can arrive for it, and a site pumping for days must not grow without
// bound.
func (m *memoryLedger) Expire(_ context.Context, now int64) ([]Ending, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Ending
	for id, j := range m.jobs {
		if j.Stub.DeadlineAt > now {
			continue
		}
		if j.Ended == "" {
			j.Ended = FateExpired
			out = append(out, Ending{JobID: id, Fate: FateExpired, Reason: "its deadline passed with no result"})
			continue // forgotten next time, after the ending is reported
		}
		delete(m.jobs, id)
	}
	return out, nil
}

func (m *memoryLedger) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, j := range m.jobs {
		if j.Ended == "" {
			n++
		}
	}
	return n
}

func copyTracked(t Tracked) Tracked {
	t.SealedTo = slices.Clone(t.SealedTo)
	if t.Result != nil {
		r := *t.Result
		t.Result = &r
	}
	if t.Stream != nil {
		g := *t.Stream
		t.Stream = &g
	}
	return t
}

// sealRefusal is why nothing may be sealed for a job, "" if something may.
func sealRefusal(t Tracked) string {
	if t.Cancelled {
		// Sealing is the irreversible half: once the ciphertext is with the
		// relay a device can run it.
		return "cancelled here; not sealing it to anybody"
	}
	if t.Ended != "" {
		return "already ended here (" + string(t.Ended) + "); not sealing it again"
	}
	return ""
}
