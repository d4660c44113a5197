package memory_test

import (
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
)

func TestMemoryStorePassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, sitestoretest.Harness{
		New: func(t *testing.T, clk *clock.Manual) sitestore.Store {
			return memory.New(memory.Options{Clock: clk})
		},
	})
}
