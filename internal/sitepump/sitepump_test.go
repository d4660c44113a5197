package sitepump

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// wakes records the wake-ups armed.
type wakes struct {
	mu sync.Mutex
	at []time.Time
}

func (w *wakes) Wake(_ context.Context, at time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at = append(w.at, at)
	return nil
}

func (w *wakes) armed() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.at...)
}

type noStarts struct{}

func (noStarts) Start(context.Context, Event) error { return errors.New("no start expected") }

// TestALeavingInvocationLeavesAWakeUpPending: a pump that
// took the lease and died before its first cycle armed nothing; every
// later trigger finds its lease live and leaves it to pump. The first of
// them arms a wake-up (recorded in the lease item), so the dead holder is
// replaced within WakeAfter; the next finds it pending and arms none, so
// one wake-up is pending, not one per trigger.
func TestALeavingInvocationLeavesAWakeUpPending(t *testing.T) {
	ctx := context.Background()
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("sitepump")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := protocol.SealedEnvelope{Ciphertext: "c", RecipientKeyID: "site", SenderKeyID: "site",
		Direction: protocol.DirectionPayload, DeadlineAt: now + protocol.EnvelopeMaxAgeMs}
	if _, err := st.Create(ctx, sitestore.CreateInput{ID: "j1", Kind: protocol.KindGenerate, Envelope: env, SizeClass: "small",
		Owner: "alice", Audience: protocol.AudienceTeam, TTLMs: 60_000, AwaitingPublish: true}); err != nil {
		t.Fatal(err)
	}
	// The holder that died: it took the lease and did nothing more. A
	// slow cadence and a long lease keep it live however slow the store
	// is while the test runs.
	if ok, err := st.TakePumpLease(ctx, "dead", 120_000); err != nil || !ok {
		t.Fatal(ok, err)
	}
	w := &wakes{}
	p, err := New(Config{Store: st, Starter: noStarts{}, Waker: w, Every: 30 * time.Second, LeaseTTL: 2 * time.Minute, WakeAfter: time.Minute,
		Server: func(context.Context) (Runner, error) { return nil, errors.New("a pump that leaves builds no server") }})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	for i := range 2 {
		rep, err := p.Handle(ctx, Event{Trigger: TriggerEnqueue})
		if err != nil || rep.Pumped || rep.Stopped != StoppedHeld {
			t.Fatalf("enqueue %d while the dead holder's lease is live: %+v %v, want it left to the holder", i, rep, err)
		}
	}
	armed := w.armed()
	if len(armed) != 1 || armed[0].Before(before.Add(time.Minute)) {
		t.Fatalf("wake-ups armed %v, want one a minute ahead", armed)
	}
	l, _, err := st.PumpLeaseNow(ctx)
	if err != nil || l.WakeAt != armed[0].UnixMilli() || l.Holder != "dead" {
		t.Fatalf("lease %+v (%v), want the dead holder's with the wake-up at %d recorded", l, err, armed[0].UnixMilli())
	}
}
