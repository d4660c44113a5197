package memory_test

import (
	"testing"

	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
	"github.com/byorelay/byorelay/store/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store {
			return memory.New(opts)
		},
	})
}
