package sitestoretest

import (
	"errors"
	"sync"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// checkpointAt is a checkpoint at seq whose envelope names seq, so a read
// shows which write it got.
func checkpointAt(seq int64) sitestore.Checkpoint {
	return sitestore.Checkpoint{Seq: seq, Envelope: protocol.SealedEnvelope{Ciphertext: string(rune('a' + seq%26)), DeadlineAt: Start.UnixMilli() + 1000}}
}

func (e *env) wantCheckpoint(jobID, leaseID string, want sitestore.Checkpoint) {
	e.Helper()
	got, ok, err := e.s.Checkpoint(e.ctx, jobID, leaseID)
	if err != nil || !ok || got != want {
		e.Fatalf("checkpoint %s/%s = %+v, %v, %v; want %+v", jobID, leaseID, got, ok, err, want)
	}
}

var checkpointCases = []testCase{
	{"a checkpoint is stored and read back; none before", func(e *env) {
		if _, ok, err := e.s.Checkpoint(e.ctx, "a", "L1"); ok || err != nil {
			e.Fatalf("a checkpoint before any write: %v %v", ok, err)
		}
		if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(10)); !ok || err != nil {
			e.Fatalf("first write: %v %v", ok, err)
		}
		e.wantCheckpoint("a", "L1", checkpointAt(10))
		if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(20)); !ok || err != nil {
			e.Fatalf("a later write: %v %v", ok, err)
		}
		e.wantCheckpoint("a", "L1", checkpointAt(20))
		if _, ok, _ := e.s.Checkpoint(e.ctx, "b", "L1"); ok {
			e.Fatal("another job has a checkpoint")
		}
	}},
	{"a stale checkpoint writer cannot roll it back", func(e *env) {
		if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(20)); !ok || err != nil {
			e.Fatalf("write: %v %v", ok, err)
		}
		for _, seq := range []int64{19, 20, 1} {
			if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(seq)); ok || err != nil {
				e.Fatalf("a write at %d over 20 = %v, %v; want refused", seq, ok, err)
			}
		}
		e.wantCheckpoint("a", "L1", checkpointAt(20))
	}},
	{"concurrent checkpoint writers end at the highest sequence", func(e *env) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := map[int64]bool{}
		for seq := int64(1); seq <= 12; seq++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(seq))
				if err != nil {
					e.Error(err)
				}
				mu.Lock()
				won[seq] = ok
				mu.Unlock()
			}()
		}
		wg.Wait()
		e.wantCheckpoint("a", "L1", checkpointAt(12))
		if !won[12] {
			e.Fatal("the highest sequence was refused")
		}
	}},
	{"a checkpoint belongs to its lease: another run's text, however long, does not replace it", func(e *env) {
		if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L1", checkpointAt(20)); !ok || err != nil {
			e.Fatalf("write under L1: %v %v", ok, err)
		}
		if _, ok, err := e.s.Checkpoint(e.ctx, "a", "L2"); ok || err != nil {
			e.Fatalf("L1's checkpoint was read for L2: %v %v", ok, err)
		}
		for _, seq := range []int64{5, 40} {
			// Shorter, then longer, than L1's: each is a first write or a
			// longer one under L2, and neither touches L1's.
			if ok, err := e.s.PutCheckpoint(e.ctx, "a", "L2", checkpointAt(seq)); !ok || err != nil {
				e.Fatalf("write under L2 at %d: %v %v", seq, ok, err)
			}
		}
		e.wantCheckpoint("a", "L1", checkpointAt(20))
		e.wantCheckpoint("a", "L2", checkpointAt(40))
	}},
	{"a checkpoint with no job id, no lease id or no sequence is refused and stores nothing", func(e *env) {
		for _, c := range []struct {
			id, lease string
			seq       int64
		}{{"", "L1", 5}, {"a", "", 5}, {"a", "L1", 0}, {"a", "L1", -3}} {
			if ok, err := e.s.PutCheckpoint(e.ctx, c.id, c.lease, checkpointAt(c.seq)); ok || !errors.Is(err, sitestore.ErrBadCheckpoint) {
				e.Fatalf("PutCheckpoint(%q, %q, %d) = %v, %v; want ErrBadCheckpoint", c.id, c.lease, c.seq, ok, err)
			}
		}
		if _, ok, _ := e.s.Checkpoint(e.ctx, "a", "L1"); ok {
			e.Fatal("a refused checkpoint was stored")
		}
	}},
}
