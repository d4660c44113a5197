package memory_test

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/store"
)

func TestMemoryStorePassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, sitestoretest.Harness{
		New: func(t *testing.T, clock *store.ManualClock) sitestore.Store {
			return memory.New(memory.Options{Clock: clock})
		},
	})
}
