package dynamo

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// canceledCounter counts the transactions DynamoDB cancels: for a pairing
// start, each is a compare-and-set on the ledger that lost to another
// starter and is decided again.
type canceledCounter struct {
	ddb.API
	canceled *atomic.Int64
}

func (c canceledCounter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.API.TransactWriteItems(ctx, in, o...)
	if isCanceled(err) {
		c.canceled.Add(1)
	}
	return out, err
}

// TestPairingStartRateOnDynamoDBLocal measures how many pairing starts a
// second the ledger takes when many relay instances start pairings at
// once: each starter is a store with its own client (one Lambda instance),
// every start is a distinct keypair, and the ceiling is raised out of the
// way so every start is stored. It reports the rate, the ledger
// compare-and-sets that lost (each one a retry) and the starts that ran out
// of attempts. It asserts only what must hold whatever the machine: every
// start either stored or reported contention, and the ledger's count equals
// the codes stored. BYORELAY_PAIRING_STARTERS and BYORELAY_PAIRING_STARTS
// set the load (default 16 starters, 400 starts).
//
//	go run ./localtest/withservices -- go test -count=1 -v -run TestPairingStartRate ./store/dynamo/
func TestPairingStartRateOnDynamoDBLocal(t *testing.T) {
	starters := envInt(t, "BYORELAY_PAIRING_STARTERS", 16)
	starts := envInt(t, "BYORELAY_PAIRING_STARTS", 400)
	ctx := context.Background()
	table := newTable(t)
	opts := store.Options{PairingCapacity: starts + 1}
	var canceled atomic.Int64
	wrap := func(api ddb.API) ddb.API { return canceledCounter{API: api, canceled: &canceled} }
	stores := make([]*Store, starters)
	for i := range stores {
		stores[i] = replica(t, table, opts, wrap)
	}
	var stored, contended atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for w := range starters {
		wg.Add(1)
		go func(s *Store) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(starts) {
					return
				}
				p := store.PendingPairing{
					DeviceCode: protocol.NewDeviceCode(), UserCode: fmt.Sprintf("RATE-%04d", i),
					Device: protocol.PublicIdentity{Identity: fmt.Sprintf("rate-%05d", i), Encryption: "e", EncryptionSig: "s"},
					Label:  "rate", Platform: "linux", DaemonVersion: "0.1.1",
					ExpiresAt: s.now() + store.PairingCodeTTLMs,
				}
				res, err := s.PutPairing(ctx, p)
				switch {
				case err == ErrContention:
					contended.Add(1)
				case err != nil:
					t.Errorf("start %d: %v", i, err)
					return
				case res != store.PutStored:
					t.Errorf("start %d: %v with the ceiling out of the way", i, res)
				default:
					stored.Add(1)
				}
			}
		}(stores[w])
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if got := stored.Load() + contended.Load(); got != int64(starts) {
		t.Fatalf("%d starts answered, want %d", got, starts)
	}
	now := stores[0].now()
	l, err := stores[0].readLedger(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	others, err := stores[0].liveElsewhere(ctx, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if live := others + l.live(now); live != stored.Load() {
		t.Fatalf("ledger counts %d live codes, %d were stored", live, stored.Load())
	}
	t.Logf("%d starters, %d starts in %v: %.1f stored starts/s; %d ledger CAS lost (%.2f a start); %d starts out of attempts (ErrContention)",
		starters, starts, elapsed.Round(time.Millisecond), float64(stored.Load())/elapsed.Seconds(),
		canceled.Load(), float64(canceled.Load())/float64(starts), contended.Load())
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
