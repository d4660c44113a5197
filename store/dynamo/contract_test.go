package dynamo

import (
	"testing"

	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// TestStoreContractOnDynamoDBLocal runs the shared behaviour suite against a
// fresh table per store.
func TestStoreContractOnDynamoDBLocal(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store {
			return replica(t, newTable(t), opts, nil)
		},
	})
}
