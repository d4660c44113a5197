package memory_test

import (
	"testing"

	"github.com/byorelay/byorelay/sitestore"
	"github.com/byorelay/byorelay/sitestore/memory"
	"github.com/byorelay/byorelay/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/store"
)

func TestMemoryStorePassesTheSuite(t *testing.T) {
	sitestoretest.Run(t, func(t *testing.T, clock *store.ManualClock) sitestore.Store {
		return memory.New(memory.Options{Clock: clock})
	})
}
