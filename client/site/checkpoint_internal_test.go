package site

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// checkpointLedger is the memory ledger with checkpoints kept by job and
// lease, compare-and-set on the sequence as the site store keeps them.
// With fail set, every checkpoint write fails, as a store that refuses
// them does.
type checkpointLedger struct {
	*memoryLedger
	mu     sync.Mutex
	seqs   map[string]int64
	sealed map[string]protocol.SealedEnvelope
	fail   error
}

func newCheckpointLedger() *checkpointLedger {
	return &checkpointLedger{memoryLedger: newMemoryLedger(), seqs: map[string]int64{}, sealed: map[string]protocol.SealedEnvelope{}}
}

func ckptKey(jobID, leaseID string) string { return jobID + "/" + leaseID }

func (l *checkpointLedger) PutCheckpoint(_ context.Context, jobID, leaseID string, seq int64, sealed protocol.SealedEnvelope) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return false, l.fail
	}
	k := ckptKey(jobID, leaseID)
	if seq <= l.seqs[k] {
		return false, nil
	}
	l.seqs[k], l.sealed[k] = seq, sealed
	return true, nil
}

func (l *checkpointLedger) Checkpoint(_ context.Context, jobID, leaseID string) (int64, protocol.SealedEnvelope, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq, ok := l.seqs[ckptKey(jobID, leaseID)]
	return seq, l.sealed[ckptKey(jobID, leaseID)], ok, nil
}

func (l *checkpointLedger) seq(jobID, leaseID string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seqs[ckptKey(jobID, leaseID)]
}

// move puts the checkpoint stored under one job and lease under another,
// as someone who can write the store could.
func (l *checkpointLedger) move(fromJob, fromLease, toJob, toLease string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs[ckptKey(toJob, toLease)], l.sealed[ckptKey(toJob, toLease)] = l.seqs[ckptKey(fromJob, fromLease)], l.sealed[ckptKey(fromJob, fromLease)]
}

// faults collects what a client's OnStreamFault hears.
type faults struct {
	mu   sync.Mutex
	seen []StreamFault
}

func (f *faults) hear(x StreamFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, x)
}

func (f *faults) all() []StreamFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StreamFault(nil), f.seen...)
}

func checkpointClient(t *testing.T, l Ledger, heard *faults) *Client {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{RelayURL: "http://127.0.0.1:1", SiteID: "shop", Keys: keys, Ledger: l, OnStreamFault: heard.hear})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runOf is a run of job jobID under leaseID, as a grant would name it.
func runOf(jobID, leaseID string) streamRun { return streamRun{jobID: jobID, leaseID: leaseID} }

// waitSeq waits up to within for jobID's checkpoint to reach want.
func waitSeq(t *testing.T, l *checkpointLedger, run streamRun, want int64, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); l.seq(run.jobID, run.leaseID) != want; {
		if time.Now().After(end) {
			t.Fatalf("checkpoint of %s at %d after %v, want %d", run.jobID, l.seq(run.jobID, run.leaseID), within, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The cadence: CheckpointEvery code units since the last write are
// written at once, fewer are written by CheckpointInterval, and what is
// held when reading stops is written then. The checkpoint opens to the
// text, for its own job and lease only.
func TestCheckpointsEveryNUnitsOpenForTheirLeaseOnly(t *testing.T) {
	l := newCheckpointLedger()
	heard := &faults{}
	c := checkpointClient(t, l, heard)
	ctx := context.Background()
	j := runOf("j", "L1")

	k := c.startCheckpoints(ctx, j, "")
	k.offer("short")
	time.Sleep(50 * time.Millisecond)
	if l.seq("j", "L1") != 0 {
		t.Fatalf("5 units were written at once (seq %d), before the interval", l.seq("j", "L1"))
	}
	big := strings.Repeat("x", CheckpointEvery+1)
	k.offer(big)
	waitSeq(t, l, j, int64(len(big)), CheckpointInterval/2)
	k.offer(big + "y")
	waitSeq(t, l, j, int64(len(big))+1, 3*CheckpointInterval)
	k.offer(big + "yz")
	k.close()
	if l.seq("j", "L1") != int64(len(big))+2 {
		t.Fatalf("close left the checkpoint at %d, want %d", l.seq("j", "L1"), len(big)+2)
	}
	if got := c.readCheckpoint(ctx, j); got != big+"yz" {
		t.Fatalf("the checkpoint opens to %d characters, want %d", len(got), len(big)+2)
	}
	if f := heard.all(); len(f) != 0 {
		t.Fatalf("faults heard on a healthy store: %v", f)
	}

	// Moved under another job's id it does not open, and is not served;
	// moved under another lease of the same job (another run's key) it
	// opens, but names its own lease, and is not served. Each is heard as
	// tampering.
	l.move("j", "L1", "other", "L1")
	l.move("j", "L1", "j", "L2")
	for _, run := range []streamRun{runOf("other", "L1"), runOf("j", "L2")} {
		if got := c.readCheckpoint(ctx, run); got != "" {
			t.Fatalf("the checkpoint of j under L1 was served for %s under %s: %q", run.jobID, run.leaseID, got)
		}
	}
	if f := heard.all(); len(f) != 2 || f[0].Kind != FaultTampered || f[1].Kind != FaultTampered ||
		f[1].JobID != "j" || f[1].LeaseID != "L2" || !strings.Contains(f[1].Reason, "not this lease's") {
		t.Fatalf("faults heard: %v", f)
	}
	// Nor as the job's payload: its direction is not the payload's.
	_, err := protocol.Open(l.sealed[ckptKey("j", "L1")], c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{JobID: "j",
		SenderKeyID: c.keys.KeyID(), RecipientKeyID: c.keys.KeyID(), Direction: protocol.DirectionPayload})
	if err == nil {
		t.Fatal("a checkpoint opened as a payload")
	}
}

// A writer that read less than the stored checkpoint does not roll it
// back, and a checkpoint whose sequence is not its text's length is not
// served.
func TestAStaleCheckpointerLeavesTheLongerCheckpoint(t *testing.T) {
	l := newCheckpointLedger()
	c := checkpointClient(t, l, &faults{})
	ctx := context.Background()
	j := runOf("j", "L1")
	ahead := c.startCheckpoints(ctx, j, "")
	ahead.offer("hello world")
	ahead.close()
	behind := c.startCheckpoints(ctx, j, "")
	behind.offer("hello")
	behind.close()
	if got := c.readCheckpoint(ctx, j); got != "hello world" {
		t.Fatalf("the checkpoint is %q after a stale writer, want %q", got, "hello world")
	}
	l.mu.Lock()
	l.seqs[ckptKey("j", "L1")] = 3
	l.mu.Unlock()
	if got := c.readCheckpoint(ctx, j); got != "" {
		t.Fatalf("a checkpoint whose sequence is not its length was served: %q", got)
	}
}

// A store that refuses checkpoint writes is heard, every time, with the
// job, the lease and the store's error; the reader is not held up by it.
func TestAFailingCheckpointStoreReachesTheHook(t *testing.T) {
	l := newCheckpointLedger()
	l.fail = errors.New("ProvisionedThroughputExceededException: the table is throttled")
	heard := &faults{}
	c := checkpointClient(t, l, heard)
	k := c.startCheckpoints(context.Background(), runOf("j", "L1"), "")
	k.offer(strings.Repeat("x", CheckpointEvery))
	for end := time.Now().Add(5 * time.Second); len(heard.all()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("a failed checkpoint write was not heard")
		}
	}
	k.offer(strings.Repeat("x", CheckpointEvery+1))
	k.close()
	f := heard.all()
	if len(f) < 2 {
		t.Fatalf("heard %d faults, want one per failed write (at least 2): %v", len(f), f)
	}
	for _, x := range f {
		if x.Kind != FaultCheckpoint || x.JobID != "j" || x.LeaseID != "L1" || !errors.Is(x.Err, l.fail) ||
			!strings.Contains(x.Reason, "checkpoint write") {
			t.Fatalf("fault %+v", x)
		}
	}
}
