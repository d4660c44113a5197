package sitestoretest

import (
	"errors"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// checkpointAt is a checkpoint at seq whose envelope names seq, so a read
// shows which write it got.
func checkpointAt(seq int64) sitestore.Checkpoint {
	return sitestore.Checkpoint{Seq: seq, Envelope: protocol.SealedEnvelope{Ciphertext: string(rune('a' + seq%26)), DeadlineAt: Start.UnixMilli() + 1000}}
}

func wantCheckpoint(t *testing.T, e Env, jobID string, want sitestore.Checkpoint) {
	t.Helper()
	got, ok, err := e.Store.Checkpoint(ctx, jobID)
	if err != nil || !ok || got != want {
		t.Fatalf("checkpoint %s = %+v, %v, %v; want %+v", jobID, got, ok, err, want)
	}
}

func checkpointCases() []testCase {
	return []testCase{
		{"a checkpoint is stored and read back; none before", func(t *testing.T, e Env) {
			if _, ok, err := e.Store.Checkpoint(ctx, "a"); ok || err != nil {
				t.Fatalf("a checkpoint before any write: %v %v", ok, err)
			}
			if ok, err := e.Store.PutCheckpoint(ctx, "a", checkpointAt(10)); !ok || err != nil {
				t.Fatalf("first write: %v %v", ok, err)
			}
			wantCheckpoint(t, e, "a", checkpointAt(10))
			if ok, err := e.Store.PutCheckpoint(ctx, "a", checkpointAt(20)); !ok || err != nil {
				t.Fatalf("a later write: %v %v", ok, err)
			}
			wantCheckpoint(t, e, "a", checkpointAt(20))
			if _, ok, _ := e.Store.Checkpoint(ctx, "b"); ok {
				t.Fatal("another job has a checkpoint")
			}
		}},
		{"a stale checkpoint writer cannot roll it back", func(t *testing.T, e Env) {
			if ok, err := e.Store.PutCheckpoint(ctx, "a", checkpointAt(20)); !ok || err != nil {
				t.Fatalf("write: %v %v", ok, err)
			}
			for _, seq := range []int64{19, 20, 1} {
				if ok, err := e.Store.PutCheckpoint(ctx, "a", checkpointAt(seq)); ok || err != nil {
					t.Fatalf("a write at %d over 20 = %v, %v; want refused", seq, ok, err)
				}
			}
			wantCheckpoint(t, e, "a", checkpointAt(20))
		}},
		{"concurrent checkpoint writers end at the highest sequence", func(t *testing.T, e Env) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			won := map[int64]bool{}
			for seq := int64(1); seq <= 12; seq++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := e.Store.PutCheckpoint(ctx, "a", checkpointAt(seq))
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					won[seq] = ok
					mu.Unlock()
				}()
			}
			wg.Wait()
			wantCheckpoint(t, e, "a", checkpointAt(12))
			if !won[12] {
				t.Fatal("the highest sequence was refused")
			}
		}},
		{"a checkpoint with no job id or no sequence is refused and stores nothing", func(t *testing.T, e Env) {
			for _, c := range []struct {
				id  string
				seq int64
			}{{"", 5}, {"a", 0}, {"a", -3}} {
				if ok, err := e.Store.PutCheckpoint(ctx, c.id, checkpointAt(c.seq)); ok || !errors.Is(err, sitestore.ErrBadCheckpoint) {
					t.Fatalf("PutCheckpoint(%q, %d) = %v, %v; want ErrBadCheckpoint", c.id, c.seq, ok, err)
				}
			}
			if _, ok, _ := e.Store.Checkpoint(ctx, "a"); ok {
				t.Fatal("a refused checkpoint was stored")
			}
		}},
	}
}
