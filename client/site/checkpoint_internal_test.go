package site

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// checkpointLedger is the memory ledger with checkpoints kept by job id,
// compare-and-set on the sequence as the site store keeps them.
type checkpointLedger struct {
	*memoryLedger
	mu     sync.Mutex
	seqs   map[string]int64
	sealed map[string]protocol.SealedEnvelope
}

func newCheckpointLedger() *checkpointLedger {
	return &checkpointLedger{memoryLedger: newMemoryLedger(), seqs: map[string]int64{}, sealed: map[string]protocol.SealedEnvelope{}}
}

func (l *checkpointLedger) PutCheckpoint(_ context.Context, jobID string, seq int64, sealed protocol.SealedEnvelope) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq <= l.seqs[jobID] {
		return false, nil
	}
	l.seqs[jobID], l.sealed[jobID] = seq, sealed
	return true, nil
}

func (l *checkpointLedger) Checkpoint(_ context.Context, jobID string) (int64, protocol.SealedEnvelope, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq, ok := l.seqs[jobID]
	return seq, l.sealed[jobID], ok, nil
}

func (l *checkpointLedger) seq(jobID string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seqs[jobID]
}

func checkpointClient(t *testing.T, l Ledger) *Client {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{RelayURL: "http://127.0.0.1:1", SiteID: "shop", Keys: keys, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitSeq waits up to within for jobID's checkpoint to reach want.
func waitSeq(t *testing.T, l *checkpointLedger, jobID string, want int64, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); l.seq(jobID) != want; {
		if time.Now().After(end) {
			t.Fatalf("checkpoint of %s at %d after %v, want %d", jobID, l.seq(jobID), within, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The cadence: CheckpointEvery code units since the last write are
// written at once, fewer are written by CheckpointInterval, and what is
// held when reading stops is written then. The checkpoint opens to the
// text, for its own job only.
func TestCheckpointsEveryNUnitsOrTMsOpenForTheirJobOnly(t *testing.T) {
	l := newCheckpointLedger()
	c := checkpointClient(t, l)
	ctx := context.Background()

	k := c.startCheckpoints(ctx, "j", 0, "")
	k.offer("short")
	time.Sleep(50 * time.Millisecond)
	if l.seq("j") != 0 {
		t.Fatalf("5 units were written at once (seq %d), before the interval", l.seq("j"))
	}
	big := strings.Repeat("x", CheckpointEvery+1)
	k.offer(big)
	waitSeq(t, l, "j", int64(len(big)), CheckpointInterval/2)
	k.offer(big + "y")
	waitSeq(t, l, "j", int64(len(big))+1, 3*CheckpointInterval)
	k.offer(big + "yz")
	k.close()
	if l.seq("j") != int64(len(big))+2 {
		t.Fatalf("close left the checkpoint at %d, want %d", l.seq("j"), len(big)+2)
	}
	if got := c.readCheckpoint(ctx, "j"); got != big+"yz" {
		t.Fatalf("the checkpoint opens to %d characters, want %d", len(got), len(big)+2)
	}

	// Moved under another job's id it does not open, and is not served.
	l.mu.Lock()
	l.seqs["other"], l.sealed["other"] = l.seqs["j"], l.sealed["j"]
	l.mu.Unlock()
	if got := c.readCheckpoint(ctx, "other"); got != "" {
		t.Fatalf("job j's checkpoint was served for another job: %q", got)
	}
	// Nor as the job's payload: its direction is not the payload's.
	_, err := protocol.Open(l.sealed["j"], c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{JobID: "j",
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
	c := checkpointClient(t, l)
	ctx := context.Background()
	ahead := c.startCheckpoints(ctx, "j", 0, "")
	ahead.offer("hello world")
	ahead.close()
	behind := c.startCheckpoints(ctx, "j", 0, "")
	behind.offer("hello")
	behind.close()
	if got := c.readCheckpoint(ctx, "j"); got != "hello world" {
		t.Fatalf("the checkpoint is %q after a stale writer, want %q", got, "hello world")
	}
	l.mu.Lock()
	l.seqs["j"] = 3
	l.mu.Unlock()
	if got := c.readCheckpoint(ctx, "j"); got != "" {
		t.Fatalf("a checkpoint whose sequence is not its length was served: %q", got)
	}
}
