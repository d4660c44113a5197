package memory_test

import (
	"testing"

	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
	"github.com/byorelay/byorelay/store/storetest"
)

func TestStreamLogContract(t *testing.T) {
	storetest.RunStreams(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store { return memory.New(opts) },
	})
}
