package site

import (
	"context"
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

// CheckpointLedger is a Ledger that also keeps each job's durable
// checkpoint: the stream's text up to seq (its UTF-16 length), sealed to
// the site's own key. Stream writes and reads checkpoints only through a
// ledger that is one (siteserver's cloud lane over the site store is);
// with the default memory ledger there is no durable plane.
type CheckpointLedger interface {
	// PutCheckpoint stores sealed as jobID's checkpoint when seq is above
	// the stored one's (compare-and-set); false, nothing written,
	// otherwise, so a writer that read less cannot roll it back.
	PutCheckpoint(ctx context.Context, jobID string, seq int64, sealed protocol.SealedEnvelope) (bool, error)
	// Checkpoint reads jobID's checkpoint; false if none.
	Checkpoint(ctx context.Context, jobID string) (seq int64, sealed protocol.SealedEnvelope, ok bool, err error)
}

// checkpointEnvelope is the checkpoint's envelope context: the site to
// itself, as the at-rest payload is, but direction result, so that a
// checkpoint put where a payload belongs never opens as one (Open checks
// the signed direction), and bound to the job id so that one job's
// checkpoint never opens as another's.
func (c *Client) checkpointEnvelope(jobID string, createdAt int64) protocol.EnvelopeContext {
	self := c.keys.KeyID()
	return protocol.EnvelopeContext{JobID: jobID, SenderKeyID: self, RecipientKeyID: self,
		DeadlineAt: createdAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionResult}
}

// readCheckpoint is the job's checkpointed text, "" if there is none or it
// does not open: a checkpoint is an optimisation, never an error. A text
// whose length is not its sequence is discarded, so the offsets served
// from it are the text's own.
func (c *Client) readCheckpoint(ctx context.Context, jobID string) string {
	l, ok := c.ledger.(CheckpointLedger)
	if !ok {
		return ""
	}
	seq, sealed, found, err := l.Checkpoint(ctx, jobID)
	if err != nil || !found {
		return ""
	}
	self := c.keys.KeyID()
	text, err := protocol.Open(sealed, c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: jobID, SenderKeyID: self, RecipientKeyID: self, Direction: protocol.DirectionResult})
	if err != nil || stream.UTF16Len(text) != seq {
		return ""
	}
	return text
}

// checkpointer writes one reader's text at the cadence, from its own
// goroutine, so the reader never waits on the store.
type checkpointer struct {
	c         *Client
	ledger    CheckpointLedger
	jobID     string
	createdAt int64
	kick      chan struct{}
	stop      chan struct{}
	stopped   chan struct{}

	mu      sync.Mutex
	text    string
	written int64 // the sequence the store is known to hold at least
}

// startCheckpoints starts a checkpointer for jobID holding held (already
// checkpointed); nil when the ledger keeps no checkpoints.
func (c *Client) startCheckpoints(ctx context.Context, jobID string, createdAt int64, held string) *checkpointer {
	l, ok := c.ledger.(CheckpointLedger)
	if !ok {
		return nil
	}
	k := &checkpointer{c: c, ledger: l, jobID: jobID, createdAt: createdAt, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{}), text: held, written: stream.UTF16Len(held)}
	go k.run(ctx)
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

func (k *checkpointer) run(ctx context.Context) {
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
// nothing to write until this text passes it.
func (k *checkpointer) flush(ctx context.Context) {
	k.mu.Lock()
	text, seq, written := k.text, stream.UTF16Len(k.text), k.written
	k.mu.Unlock()
	if seq <= written {
		return
	}
	sealed, err := protocol.Seal(text, k.c.keys, k.c.keys.Public().Encryption, k.c.checkpointEnvelope(k.jobID, k.createdAt))
	if err != nil {
		return
	}
	if _, err := k.ledger.PutCheckpoint(ctx, k.jobID, seq, sealed); err != nil {
		return // tried again at the next cadence
	}
	k.mu.Lock()
	k.written = max(k.written, seq)
	k.mu.Unlock()
}
