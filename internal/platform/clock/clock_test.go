package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestManualMovesOnlyWhenTold(t *testing.T) {
	start := time.UnixMilli(1_800_000_000_000)
	c := NewManual(start)
	if got := EpochMs(c.Now()); got != 1_800_000_000_000 {
		t.Fatalf("now = %d", got)
	}
	if got := EpochMs(c.Advance(1500 * time.Millisecond)); got != 1_800_000_001_500 {
		t.Fatalf("after advance = %d", got)
	}
	c.Set(start)
	if got := EpochMs(c.Now()); got != 1_800_000_000_000 {
		t.Fatalf("after set = %d", got)
	}
}

func TestSleepWaitsOutItsDurationAndReturnsNil(t *testing.T) {
	began := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatalf("a whole wait returned %v", err)
	}
	if waited := time.Since(began); waited < 20*time.Millisecond {
		t.Fatalf("Sleep(20ms) returned after %v", waited)
	}
}

func TestSleepReturnsTheContextsErrorWhenItIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait returned %v, want context.Canceled", err)
	}
	if waited := time.Since(began); waited > time.Minute {
		t.Fatalf("a cancelled wait took %v", waited)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past the deadline returned %v, want context.DeadlineExceeded", err)
	}
}
