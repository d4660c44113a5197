package site

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/protocol"
)

// The durable checkpoint plane (docs/streaming.md): a process that reads a
// stream writes the text so far into the site's own store, so a reader
// with no live stream (late, another process, the relay's frames gone) is
// served what was already said before the result arrives.
const (
	// CheckpointEvery is the checkpoint's size cadence: a write once this
	// many UTF-16 code units arrived since the last one.
	CheckpointEvery = 512
	// CheckpointInterval is its time cadence: text held unwritten is
	// written within this long, whichever cadence comes first.
	CheckpointInterval = time.Second
)

// CheckpointLedger is a Ledger that also keeps each stream's durable
// checkpoint: the text of one lease's run of a job up to seq (its UTF-16
// length), sealed to the site's own key. A stream belongs to its lease (a
// re-run under another lease says something else), so checkpoints are
// kept by job and lease. Stream writes and reads checkpoints only through
// a ledger that is one (siteserver's cloud lane over the site store is);
// with the default memory ledger there is no durable plane.
type CheckpointLedger interface {
	// PutCheckpoint stores sealed as the checkpoint of jobID's run under
	// leaseID when seq is above the stored one's for that job and lease
	// (compare-and-set); false, nothing written, otherwise, so a writer
	// that read less cannot roll it back, and another lease's run never
	// replaces it.
	PutCheckpoint(ctx context.Context, jobID, leaseID string, seq int64, sealed protocol.SealedEnvelope) (bool, error)
	// Checkpoint reads the checkpoint of jobID's run under leaseID; false
	// if none.
	Checkpoint(ctx context.Context, jobID, leaseID string) (seq int64, sealed protocol.SealedEnvelope, ok bool, err error)
}

// checkpointEnvelope is the checkpoint's envelope context: the site to
// itself, as the at-rest payload is, but direction result, so that a
// checkpoint put where a payload belongs never opens as one (Open checks
// the signed direction), and bound to the job id so that one job's
// checkpoint never opens as another's. The lease is bound inside the
// sealed content (checkpointContent).
func (c *Client) checkpointEnvelope(jobID string, createdAt int64) protocol.EnvelopeContext {
	self := c.keys.KeyID()
	return protocol.EnvelopeContext{JobID: jobID, SenderKeyID: self, RecipientKeyID: self,
		DeadlineAt: createdAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionResult}
}

// checkpointContent is what a checkpoint seals: the text and the lease
// whose run said it. The lease is inside the seal, so a checkpoint of one
// lease stored (or moved) under another's key does not open as its.
type checkpointContent struct {
	LeaseID string `json:"leaseId"`
	Text    string `json:"text"`
}

// readCheckpoint is the checkpointed text of run, "" if there is none or
// it cannot be used: a checkpoint is an optimisation, never an error, but
// a read that failed or one that does not open is a fault to hear. A text
// whose length is not its sequence is discarded, so the offsets served
// from it are the text's own.
func (c *Client) readCheckpoint(ctx context.Context, run streamRun) string {
	l, ok := c.ledger.(CheckpointLedger)
	if !ok {
		return ""
	}
	seq, sealed, found, err := l.Checkpoint(ctx, run.jobID, run.leaseID)
	if err != nil {
		c.fault(run.fault(FaultCheckpoint, "the checkpoint could not be read", err))
		return ""
	}
	if !found {
		return ""
	}
	self := c.keys.KeyID()
	plain, err := protocol.Open(sealed, c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: run.jobID, SenderKeyID: self, RecipientKeyID: self, Direction: protocol.DirectionResult})
	if err != nil {
		c.fault(run.fault(FaultTampered, "the checkpoint does not open", err))
		return ""
	}
	var content checkpointContent
	dec := json.NewDecoder(strings.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&content); err != nil || content.LeaseID != run.leaseID || stream.UTF16Len(content.Text) != seq {
		c.fault(run.fault(FaultTampered, "the checkpoint is not this lease's or not its stored length", err))
		return ""
	}
	return content.Text
}

// checkpointer writes one reader's text at the cadence, from its own
// goroutine, so the reader never waits on the store.
type checkpointer struct {
	c       *Client
	ledger  CheckpointLedger
	run     streamRun
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex
	text    string
	written int64 // the sequence the store is known to hold at least
}

// startCheckpoints starts a checkpointer for run holding held (already
// checkpointed); nil when the ledger keeps no checkpoints.
func (c *Client) startCheckpoints(ctx context.Context, run streamRun, held string) *checkpointer {
	l, ok := c.ledger.(CheckpointLedger)
	if !ok {
		return nil
	}
	k := &checkpointer{c: c, ledger: l, run: run, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{}), text: held, written: stream.UTF16Len(held)}
	go k.loop(ctx)
	return k
}

// offer hands the checkpointer the text read so far.
func (k *checkpointer) offer(text string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.text = text
	due := stream.UTF16Len(text)-k.written >= CheckpointEvery
	k.mu.Unlock()
	if due {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

// close writes what is held and stops the checkpointer.
func (k *checkpointer) close() {
	if k == nil {
		return
	}
	close(k.stop)
	<-k.stopped
}

func (k *checkpointer) loop(ctx context.Context) {
	defer close(k.stopped)
	tick := time.NewTicker(CheckpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			// The last text is written even when the reader's context
			// ended (a browser that left), within a bound.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			k.flush(fctx)
			cancel()
			return
		case <-k.kick:
		case <-tick.C:
		}
		k.flush(ctx)
	}
}

// flush writes the held text if it is longer than what the store holds. A
// refused write means the store holds as much or more (another reader's):
// nothing to write until this text passes it. A failed one is heard
// (OnStreamFault) and tried again at the next cadence.
func (k *checkpointer) flush(ctx context.Context) {
	k.mu.Lock()
	text, seq, written := k.text, stream.UTF16Len(k.text), k.written
	k.mu.Unlock()
	if seq <= written {
		return
	}
	plain, err := json.Marshal(checkpointContent{LeaseID: k.run.leaseID, Text: text})
	if err != nil {
		k.c.fault(k.run.fault(FaultCheckpoint, "the checkpoint could not be encoded", err))
		return
	}
	sealed, err := protocol.Seal(string(plain), k.c.keys, k.c.keys.Public().Encryption, k.c.checkpointEnvelope(k.run.jobID, k.run.createdAt))
	if err != nil {
		k.c.fault(k.run.fault(FaultCheckpoint, "the checkpoint could not be sealed", err))
		return
	}
	if _, err := k.ledger.PutCheckpoint(ctx, k.run.jobID, k.run.leaseID, seq, sealed); err != nil {
		k.c.fault(k.run.fault(FaultCheckpoint, fmt.Sprintf("the checkpoint write at %d units failed", seq), err))
		return
	}
	k.mu.Lock()
	k.written = max(k.written, seq)
	k.mu.Unlock()
}
