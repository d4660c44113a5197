package dynamo

import (
	"testing"

	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// TestStoreContractOnDynamoDBLocal runs the shared behaviour suite against a
// fresh table per store, at the default due shard count: every request
// reads one shard, so a request's answer and what it leaves must not depend
// on which shard its in-line sweep read.
//
// Three cases pin which due items a bounded in-line sweep picks across the
// whole store (the earliest InlineSweepLimit of everything due); over many
// shards a call reads one shard and picks its earliest, so those run in
// TestStoreContractOnOneDueShard, where one shard is everything due.
func TestStoreContractOnDynamoDBLocal(t *testing.T) {
	const why = "pins the in-line sweep's pick across every shard; run over one shard in TestStoreContractOnOneDueShard"
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store {
			return replica(t, newTable(t), opts, nil)
		},
		Skip: map[string]string{
			"inline sweep/moves at most its bound, earliest due first, and repeated calls drain the backlog": why,
			"inline sweep/defaults to DefaultInlineSweepLimit":                                               why,
			"inline sweep/claims sweep at most the bound and never grant a job past its deadline":            why,
		},
	})
}

// TestStoreContractOnOneDueShard runs every case of the suite over a table
// whose due index has one shard: an in-line sweep then reads everything
// due, and the store must answer exactly as the memory store does.
func TestStoreContractOnOneDueShard(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, opts store.Options) storetest.Store {
			s, err := New(Config{DB: localtest.DynamoClient(t), Table: newTable(t), Options: opts, DueShards: 1})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
