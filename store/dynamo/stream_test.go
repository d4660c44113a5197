package dynamo

import (
	"testing"

	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// TestStreamLogContractOnDynamoDBLocal runs the frame-log cases against a
// fresh table per store.
func TestStreamLogContractOnDynamoDBLocal(t *testing.T) {
	storetest.RunStreams(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store {
			return replica(t, newTable(t), opts, nil)
		},
	})
}
