package sitepump

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	site "github.com/byorelay/byorelay/client/site"
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

// storeWithOneJob is a site store on DynamoDB Local, in a table of its
// own, holding one job waiting to be published.
func storeWithOneJob(t *testing.T, id string) *sitedynamo.Store {
	t.Helper()
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
	if _, err := st.Create(ctx, sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Envelope: env, SizeClass: "small",
		Owner: "alice", Audience: protocol.AudienceTeam, TTLMs: 60_000, AwaitingPublish: true}); err != nil {
		t.Fatal(err)
	}
	return st
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
	st := storeWithOneJob(t, "j1")
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

// endsJob is a pump's loop that publishes nothing and ends the site's one
// job after a while, as a collected result would.
type endsJob struct {
	st    *sitedynamo.Store
	id    string
	after time.Duration
}

func (r *endsJob) Run(ctx context.Context, every time.Duration, _ func(site.Report)) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(r.after):
	}
	if _, _, err := r.st.End(ctx, sitestore.EndInput{JobID: r.id, Outcome: protocol.FailedOutcome("test", "ended by the test", false), Reason: "test"}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// cycleSeen is one cycle as OnCycle saw it: whether it found work (the
// job waits unpublished, so a cycle with work reports a lag) and how
// many wake-ups were armed by then.
type cycleSeen struct {
	work  bool
	armed int
}

// TestAPumpArmsOnlyInCyclesThatFoundWork: a wake-up armed in the cycle
// that finds the site idle would fire after the pump stopped, a second
// wake-up of an idle site. With wake-ups due at once (WakeAfter 1 ms),
// every cycle that finds work arms exactly one after it reports, and the
// cycle that finds the job ended arms none. An idle site's own trigger
// arms nothing at all.
func TestAPumpArmsOnlyInCyclesThatFoundWork(t *testing.T) {
	ctx := context.Background()
	st := storeWithOneJob(t, "j1")
	w := &wakes{}
	var cycles []cycleSeen // OnCycle runs on the pump's own goroutine
	p, err := New(Config{Store: st, Starter: noStarts{}, Waker: w, Every: 100 * time.Millisecond, LeaseTTL: 10 * time.Second,
		WakeAfter: time.Millisecond, Budget: time.Minute,
		Server: func(context.Context) (Runner, error) {
			return &endsJob{st: st, id: "j1", after: 500 * time.Millisecond}, nil
		},
		OnCycle: func(c Cycle) { cycles = append(cycles, cycleSeen{work: c.LagMs > 0, armed: len(w.armed())}) }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := p.Handle(ctx, Event{Trigger: TriggerEnqueue})
	if err != nil || !rep.Pumped || rep.Stopped != StoppedIdle {
		t.Fatalf("pump: %+v %v, want it to pump and stop idle", rep, err)
	}
	total := len(w.armed())
	if len(cycles) < 2 || !cycles[0].work || cycles[len(cycles)-1].work {
		t.Fatalf("cycles %+v: want cycles with work, then one idle", cycles)
	}
	for i, c := range cycles {
		next := total
		if i+1 < len(cycles) {
			next = cycles[i+1].armed
		}
		want := 0
		if c.work {
			want = 1
		}
		if got := next - c.armed; got != want {
			t.Fatalf("cycle %d of %+v (work %v) armed %d wake-ups, want %d", i, cycles, c.work, got, want)
		}
	}

	rep, err = p.Handle(ctx, Event{Trigger: TriggerWakeup})
	if err != nil || rep.Pumped || rep.Stopped != StoppedIdle {
		t.Fatalf("an idle site's wake-up: %+v %v, want it to leave idle", rep, err)
	}
	if got := len(w.armed()); got != total {
		t.Fatalf("an idle site's wake-up armed %d more", got-total)
	}
}

// refusedWakes is a Scheduler that refuses every wake-up.
type refusedWakes struct{}

func (refusedWakes) Wake(context.Context, time.Time) error { return errors.New("scheduler refused") }

// TestAWakeUpTheSchedulerRefusedIsForgotten: a wake-up the Scheduler
// refused to arm is not left recorded, so the next trigger arms one.
// Left recorded, it would stop every trigger from arming one until its
// time came, and the site's in-flight jobs would wait for an enqueue.
func TestAWakeUpTheSchedulerRefusedIsForgotten(t *testing.T) {
	ctx := context.Background()
	st := storeWithOneJob(t, "j1")
	if ok, err := st.TakePumpLease(ctx, "live", 120_000); err != nil || !ok {
		t.Fatal(ok, err)
	}
	leaving := func(w Waker) *Pump {
		p, err := New(Config{Store: st, Starter: noStarts{}, Waker: w, Every: 30 * time.Second, LeaseTTL: 2 * time.Minute, WakeAfter: time.Minute,
			Server: func(context.Context) (Runner, error) { return nil, errors.New("a pump that leaves builds no server") }})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if rep, err := leaving(refusedWakes{}).Handle(ctx, Event{Trigger: TriggerEnqueue}); err != nil || rep.Stopped != StoppedHeld {
		t.Fatalf("enqueue with the Scheduler refusing: %+v %v", rep, err)
	}
	if l, _, err := st.PumpLeaseNow(ctx); err != nil || l.WakeAt != 0 {
		t.Fatalf("lease %+v (%v): a wake-up the Scheduler refused is still recorded", l, err)
	}
	w := &wakes{}
	if rep, err := leaving(w).Handle(ctx, Event{Trigger: TriggerEnqueue}); err != nil || rep.Stopped != StoppedHeld {
		t.Fatalf("the next enqueue: %+v %v", rep, err)
	}
	armed := w.armed()
	l, _, err := st.PumpLeaseNow(ctx)
	if err != nil || len(armed) != 1 || l.WakeAt != armed[0].UnixMilli() {
		t.Fatalf("after the next enqueue: armed %v, lease %+v (%v); want one armed and recorded", armed, l, err)
	}
}
