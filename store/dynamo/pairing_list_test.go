package dynamo

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// queryCounter counts the reads a list makes, and fails a Scan outright.
// A list queries the ledger's shards at once, so the count is atomic.
type queryCounter struct {
	ddb.API
	t       *testing.T
	queries atomic.Int64
}

func (q *queryCounter) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q.queries.Add(1)
	return q.API.Query(ctx, in, o...)
}

func (q *queryCounter) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	q.t.Errorf("a Scan of %s", *in.TableName)
	return q.API.Scan(ctx, in, o...)
}

// The list is one Query of the ledger's partition, but a Query answers at
// most 1 MB: twelve pairings carrying the largest self-description the
// relay accepts are more than that, and all twelve are still listed, in
// order, by following the pages. Only DynamoDB pages, so the suite cannot
// see this.
func TestListingPairingsFollowsQueryPages(t *testing.T) {
	ctx := context.Background()
	counter := &queryCounter{t: t}
	s := replica(t, newTable(t), store.Options{}, func(api ddb.API) ddb.API { counter.API = api; return counter })
	// One capability whose known models fill most of the bound.
	models := make([]string, 0, 1000)
	for n := range 1000 {
		models = append(models, fmt.Sprintf("model-%04d-%s", n, strings.Repeat("x", 100)))
	}
	caps := []protocol.Capability{{Kind: "llm.generate", Service: "s", BackendID: "b", BackendClass: "process",
		Model: "m", KnownModels: models, OfferScope: "private"}}
	const n = 12
	for i := range n {
		p := store.PendingPairing{
			DeviceCode: protocol.NewDeviceCode(), UserCode: fmt.Sprintf("AAAA-%04d", i),
			Device:       protocol.PublicIdentity{Identity: fmt.Sprintf("id-%02d", i), Encryption: "e", EncryptionSig: "s"},
			Capabilities: caps, Label: "big", Platform: "linux", DaemonVersion: "0.1.1",
			ExpiresAt: s.now() + store.PairingCodeTTLMs + int64(i), // later ones newer
		}
		if res, err := s.PutPairing(ctx, p); err != nil || res != store.PutStored {
			t.Fatalf("put %d: %v %v", i, res, err)
		}
	}
	counter.queries.Store(0)
	list, err := s.ListPairings(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("listed %d pairings, want %d", len(list), n)
	}
	for i, p := range list {
		if want := fmt.Sprintf("AAAA-%04d", n-1-i); p.UserCode != want || p.DeviceCode != "" || len(p.Capabilities[0].KnownModels) != len(models) {
			t.Fatalf("entry %d is %s (device code %q, %d models), want %s whole without its device code",
				i, p.UserCode, p.DeviceCode, len(p.Capabilities[0].KnownModels), want)
		}
	}
	if got := counter.queries.Load(); got < 2 {
		t.Fatalf("%d Query calls for %d pairings of ~110 KB each: the pages were not followed", got, n)
	}
}
