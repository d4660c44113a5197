package daemon_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// start is where every test's clock begins.
var start = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// world is a real relay over the memory store, with a control plane the
// test drives through its admin API, served over HTTP. One manual clock
// runs everything (relay, store, sites, daemons), so a lease lapses when the
// test says so and never by waiting.
type world struct {
	t     *testing.T
	ctx   context.Context
	clock *clock.Manual
	admin *controlplane.Admin
	mem   *memory.Store
	relay *relay.Relay
	url   string
	// delivered is every result each site's pumps delivered, in order: a
	// result can arrive on the pump that sealed its payload, if the device
	// is quick.
	delivered map[*site.Client][]site.Result
}

func newWorld(t *testing.T, options ...func(*relay.Config)) *world {
	t.Helper()
	clk := clock.NewManual(start)
	mem := memory.New(store.Options{Clock: clk})
	cp := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: cp, Pairings: mem, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	cfg := relay.Config{
		Store: mem, Pairing: mem, VerificationURL: "https://control.example/approve",
		Projection: cp, Clock: clk,
	}
	for _, o := range options {
		o(&cfg)
	}
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.HTTPHandler())
	t.Cleanup(srv.Close)
	return &world{t: t, ctx: context.Background(), clock: clk, admin: admin, mem: mem, relay: r, url: srv.URL,
		delivered: map[*site.Client][]site.Result{}}
}

// newSite registers a site with fresh keys and returns its SDK client.
func (w *world) newSite(siteID string) *site.Client {
	w.t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		w.t.Fatal(err)
	}
	if _, _, err := w.admin.RegisterSite(w.ctx, siteID, keys.Public()); err != nil {
		w.t.Fatal(err)
	}
	c, err := site.New(site.Config{RelayURL: w.url, SiteID: siteID, Keys: keys, Clock: w.clock, RetryBackoff: time.Millisecond})
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) consent(owner string, siteIDs ...string) {
	w.t.Helper()
	for _, id := range siteIDs {
		if _, _, err := w.admin.AddConsent(w.ctx, owner, id); err != nil {
			w.t.Fatal(err)
		}
	}
}

// device is a daemon under test and what it said.
type device struct {
	*daemon.Daemon
	keys   *protocol.Keys
	events *recorder
}

// newDaemon builds an unpaired daemon; cfg fills in anything left zero.
func (w *world) newDaemon(cfg daemon.Config) *device {
	w.t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		w.t.Fatal(err)
	}
	rec := &recorder{}
	// A test's own OnEvent is told each event after the recorder.
	also := cfg.OnEvent
	cfg.RelayURL, cfg.Keys, cfg.Clock = w.url, keys, w.clock
	cfg.OnEvent = func(e daemon.Event) {
		rec.add(e)
		if also != nil {
			also(e)
		}
	}
	if cfg.Backend == nil {
		cfg.Backend = daemon.EchoBackend{}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = quickSleep
	}
	d, err := daemon.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return &device{Daemon: d, keys: keys, events: rec}
}

// pairDaemon builds a daemon and pairs it through the device-code flow,
// approving the code on the control plane as owner.
func (w *world) pairDaemon(owner, runnerID string, cfg daemon.Config) *device {
	w.t.Helper()
	d := w.newDaemon(cfg)
	codes := make(chan daemon.PairCode, 1)
	paired := make(chan error, 1)
	go func() {
		_, err := d.Pair(w.ctx, "test device", func(c daemon.PairCode) { codes <- c })
		paired <- err
	}()
	var code daemon.PairCode
	select {
	case code = <-codes:
	case err := <-paired:
		w.t.Fatalf("pairing ended before a code: %v", err)
	}
	if _, _, err := w.admin.ApprovePairing(w.ctx, code.UserCode, owner, runnerID); err != nil {
		w.t.Fatal(err)
	}
	if err := <-paired; err != nil {
		w.t.Fatal(err)
	}
	return d
}

// quickSleep stands in for every wait the daemon makes: a millisecond of
// real time, so goroutines interleave, and no clock movement.
func quickSleep(ctx context.Context, _ time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Millisecond):
		return nil
	}
}

func (w *world) tick(d *device) int {
	w.t.Helper()
	n, err := d.Tick(w.ctx)
	if err != nil {
		w.t.Fatalf("tick: %v", err)
	}
	return n
}

func (w *world) pump(s *site.Client) site.Report {
	w.t.Helper()
	rep, err := s.Pump(w.ctx)
	if err != nil {
		w.t.Fatalf("pump: %v", err)
	}
	if rep.Deferred != "" {
		w.t.Fatalf("pump deferred: %s", rep.Deferred)
	}
	w.delivered[s] = append(w.delivered[s], rep.Results...)
	return rep
}

func (w *world) publish(s *site.Client, id, owner string, p protocol.JobPayload) {
	w.t.Helper()
	stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owner, Audience: "private",
		DeadlineAt: w.clock.Now().Add(time.Hour).UnixMilli()}
	if p.Messages != nil {
		stub.Kind = protocol.KindChat
	}
	if _, err := s.Publish(w.ctx, stub, p); err != nil {
		w.t.Fatalf("publish %s: %v", id, err)
	}
}

// recorder keeps a daemon's events for the test to wait on.
type recorder struct {
	mu     sync.Mutex
	events []daemon.Event
}

func (r *recorder) add(e daemon.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) has(typ daemon.EventType, jobID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == typ && e.JobID == jobID {
			return true
		}
	}
	return false
}

func (r *recorder) find(typ daemon.EventType, jobID string) (daemon.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == typ && e.JobID == jobID {
			return e, true
		}
	}
	return daemon.Event{}, false
}

// waitLimit bounds a wait for goroutines to finish: a correct run ends it
// in milliseconds, so only a failing one ever reaches it, and it is long
// enough that a loaded machine (or -race) never does.
const waitLimit = time.Minute

// waitFor waits (in real time: this is goroutines finishing, not a timer
// under test) until the daemon reports typ for jobID.
func (r *recorder) waitFor(t *testing.T, typ daemon.EventType, jobID string) daemon.Event {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if e, ok := r.find(typ, jobID); ok {
			return e
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("no %s event for job %q; events: %+v", typ, jobID, r.events)
	return daemon.Event{}
}

// blockingBackend answers like echo, except prompts containing "hang",
// which it holds until the job's context ends.
type blockingBackend struct{ daemon.EchoBackend }

func (b blockingBackend) Run(ctx context.Context, prompt string) (daemon.Answer, error) {
	if !containsHang(prompt) {
		return b.EchoBackend.Run(ctx, prompt)
	}
	<-ctx.Done()
	return daemon.Answer{}, &daemon.BackendError{Code: "canceled", Message: "the job was canceled"}
}

func containsHang(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		if s[i:i+4] == "hang" {
			return true
		}
	}
	return false
}
