package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/protocol"
)

func TestMemoryStorePassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, sitestoretest.Harness{
		New: func(t *testing.T, clk *clock.Manual) sitestore.Store {
			return memory.New(memory.Options{Clock: clk})
		},
	})
}

// TestTheMemoryStoreDropsAnEndedJobAfterItsRetention: a finished job, its
// answer with it, is there until its retention has passed since it ended,
// and gone at the first sweep after.
func TestTheMemoryStoreDropsAnEndedJobAfterItsRetention(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(sitestoretest.Start)
	const retention = 60_000
	s := memory.New(memory.Options{Clock: clk, RetentionMs: retention})
	if _, err := s.Create(ctx, sitestore.CreateInput{ID: "a", Kind: protocol.KindGenerate, Owner: "alice", SizeClass: "small"}); err != nil {
		t.Fatal(err)
	}
	live := sitestore.CreateInput{ID: "live", Kind: protocol.KindGenerate, Owner: "alice", SizeClass: "small", TTLMs: 10 * retention}
	if _, err := s.Create(ctx, live); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(retention*time.Millisecond - time.Millisecond)
	if _, err := s.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.Get(ctx, "a"); !found {
		t.Fatal("an ended job was dropped before its retention passed")
	}
	clk.Advance(time.Millisecond)
	if _, err := s.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.Get(ctx, "a"); found {
		t.Fatal("an ended job outlived its retention")
	}
	if _, found, _ := s.Get(ctx, "live"); !found {
		t.Fatal("a live job was dropped")
	}
}
