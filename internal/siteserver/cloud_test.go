package siteserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitememory "github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

var cloudStart = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// cloudWorld is a real relay (memory store) over HTTP, a Go daemon paired
// to it, and a site store that outlives the site processes a test starts on
// it: a restart is a new Server on the same store, the old one dropped
// wherever the test stopped it.
type cloudWorld struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock.Manual
	relay  *relay.Relay
	url    string
	keys   *protocol.Keys
	store  sitestore.Store
	daemon *daemon.Daemon
	// device is the daemon's identity, for a test that claims by hand.
	device *relaytest.Daemon
	// daemon2 is a second device of alice's (runner-b), which ticks only
	// when a test ticks it.
	daemon2 *daemon.Daemon
	device2 *relaytest.Daemon
	// relayStore is the relay's store, for a test that asks what the relay
	// ever saw.
	relayStore *memory.Store
}

func newCloudWorld(t *testing.T) *cloudWorld {
	t.Helper()
	return newCloudWorldOn(t, func(clk *clock.Manual) sitestore.Store {
		return sitememory.New(sitememory.Options{Clock: clk})
	})
}

// newCloudWorldOn is the world with the site store newStore makes on the
// world's one clock.
func newCloudWorldOn(t *testing.T, newStore func(*clock.Manual) sitestore.Store) *cloudWorld {
	t.Helper()
	return newCloudWorldWith(t, newStore, daemon.Streaming{})
}

// newCloudWorldWith is the world whose daemon streams as streams says.
func newCloudWorldWith(t *testing.T, newStore func(*clock.Manual) sitestore.Store, streams daemon.Streaming) *cloudWorld {
	t.Helper()
	clk := clock.NewManual(cloudStart)
	shop := relaytest.NewSite(t, "shop")
	device := relaytest.NewDaemon(t, "runner-a", "alice")
	device2 := relaytest.NewDaemon(t, "runner-b", "alice")
	relayStore := memory.New(store.Options{Clock: clk})
	r, err := relay.New(relay.Config{Store: relayStore, Clock: clk,
		Projection: relay.NewStaticProjection(relaytest.NewFixture().
			Site(shop).Device(device).Device(device2).Consent("alice", "shop").Projection())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.HTTPHandler())
	t.Cleanup(srv.Close)
	newDaemon := func(device *relaytest.Daemon) *daemon.Daemon {
		d, err := daemon.New(daemon.Config{RelayURL: srv.URL, Keys: device.Keys, Clock: clk,
			Pairing: daemon.Pairing{RunnerID: device.RunnerID, Owner: device.Owner},
			Backend: daemon.EchoBackend{}, Streams: streams,
			Sleep: func(ctx context.Context, _ time.Duration) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Millisecond):
					return nil
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return &cloudWorld{t: t, ctx: context.Background(), clock: clk, relay: r, url: srv.URL, keys: shop.Keys,
		store: newStore(clk), daemon: newDaemon(device), device: device,
		daemon2: newDaemon(device2), device2: device2, relayStore: relayStore}
}

// start starts a site process on the world's store; transport, if set,
// stands between it and the relay.
func (w *cloudWorld) start(transport http.RoundTripper) *siteserver.Server {
	w.t.Helper()
	lane := &siteserver.CloudLane{RelayURL: w.url, SiteID: "shop"}
	if transport != nil {
		lane.HTTPClient = &http.Client{Transport: transport}
	}
	s, err := siteserver.New(siteserver.Config{Store: w.store, Keys: w.keys, Cloud: lane})
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// failOn answers every request whose path ends in suffix with a 503, as a
// site that died before the request left would never have sent it.
type failOn struct{ suffix string }

func (f failOn) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, f.suffix) {
		return nil, errors.New("the site died before this left")
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (w *cloudWorld) enqueue(s *siteserver.Server, id, prompt string) {
	w.t.Helper()
	payload, _ := json.Marshal(map[string]string{"prompt": prompt})
	if _, err := s.Enqueue(w.ctx, siteserver.EnqueueInput{ID: id, Kind: protocol.KindGenerate, Payload: payload, Owner: "alice"}); err != nil {
		w.t.Fatalf("enqueue %s: %v", id, err)
	}
}

// settle ticks the daemon and pumps the site until done says so (real time
// is only the daemon's goroutines finishing; no clock moves). A correct
// world settles in milliseconds; the limit is for one that never does,
// long enough that a loaded machine does not reach it.
func (w *cloudWorld) settle(s *siteserver.Server, done func() bool) []site.Report {
	w.t.Helper()
	var reps []site.Report
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if _, err := w.daemon.Tick(w.ctx); err != nil {
			w.t.Fatalf("tick: %v", err)
		}
		rep, err := s.Pump(w.ctx)
		if err != nil {
			w.t.Fatalf("pump: %v", err)
		}
		reps = append(reps, rep)
		if done() {
			return reps
		}
		time.Sleep(3 * time.Millisecond)
	}
	w.t.Fatal("the world did not settle")
	return nil
}

func (w *cloudWorld) job(id string) sitestore.Job {
	w.t.Helper()
	j, found, err := w.store.Get(w.ctx, id)
	if err != nil || !found {
		w.t.Fatalf("job %s: found=%v err=%v", id, found, err)
	}
	return j
}

func (w *cloudWorld) ended(id string) func() bool {
	return func() bool { return siteserver.FateOf(w.job(id)) != "" }
}

func echoOf(prompt string) string {
	return "echo: " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
}

// answer is a job's answer as the app reads it (opened from its seal);
// the store itself holds the disposition alone.
func (w *cloudWorld) answer(id string) string {
	w.t.Helper()
	if stored := w.job(id).Outcome; stored != nil && (stored.Text != nil || stored.Message != "") {
		w.t.Fatalf("job %s: the store holds the answer in the clear: %+v", id, stored)
	}
	j, found, err := w.start(nil).Job(w.ctx, id)
	if err != nil || !found {
		w.t.Fatalf("job %s: found=%v err=%v", id, found, err)
	}
	return j.Outcome.TextOrEmpty()
}

func (w *cloudWorld) wantVerified(id, prompt string) {
	w.t.Helper()
	j := w.job(id)
	if siteserver.FateOf(j) != site.FateVerified || j.State != sitestore.StateOK || w.answer(id) != echoOf(prompt) {
		w.t.Fatalf("job %s: fate %s, %+v", id, siteserver.FateOf(j), j)
	}
	if j.Provenance == nil || j.Provenance.RunnerID != "runner-a" || !j.Provenance.Untrusted || j.Audience != protocol.AudienceTeam {
		w.t.Fatalf("job %s provenance: %+v", id, j.Provenance)
	}
}

func endings(reps []site.Report, id string) int {
	n := 0
	for _, r := range reps {
		for _, e := range r.Ended {
			if e.JobID == id {
				n++
			}
		}
	}
	return n
}

func TestCloudLanePublishesAndCompletesThroughARelay(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	if s.Lane() != siteserver.LaneCloud {
		t.Fatalf("lane %s", s.Lane())
	}
	var heard atomic.Int32
	defer s.Subscribe("j1", func() { heard.Add(1) })()
	w.enqueue(s, "j1", "hello")
	if j := w.job("j1"); j.AwaitingPublish || j.Audience != protocol.AudienceTeam || j.DeadlineAt == 0 {
		t.Fatalf("after enqueue: %+v", j)
	}
	reps := w.settle(s, w.ended("j1"))
	w.wantVerified("j1", "hello")
	if n := endings(reps, "j1"); n != 1 {
		t.Fatalf("reported %d times", n)
	}
	if heard.Load() < 3 {
		t.Fatalf("subscriber heard %d writes (create, publish, seal, complete)", heard.Load())
	}
	res, found, err := s.Result(w.ctx, "j1")
	if err != nil || !found || res.State != sitestore.StateOK || res.Outcome.TextOrEmpty() != echoOf("hello") {
		t.Fatalf("result: %+v %v %v", res, found, err)
	}
}

func TestTheCloudLaneRefusesWhatOnlyTheDirectLaneCanDo(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	payload := json.RawMessage(`{"prompt":"x"}`)
	var bad *siteserver.InvalidInput
	for name, in := range map[string]siteserver.EnqueueInput{
		"an audience": {Kind: protocol.KindGenerate, Payload: payload, Owner: "alice", Audience: protocol.AudiencePrivate},
	} {
		if _, err := s.Enqueue(w.ctx, in); !errors.As(err, &bad) {
			t.Errorf("enqueue naming %s: %v, want a refusal", name, err)
		}
	}
	if _, err := s.RunnerAvailability(w.ctx, siteserver.AvailabilityQuery{Kind: protocol.KindGenerate, Owner: "alice"}); !errors.Is(err, siteserver.ErrCloudLane) {
		t.Errorf("availability: %v", err)
	}
	if resp := s.Handle(w.ctx, siteserver.Request{Method: http.MethodPost, Path: "/byollm/claim", Body: []byte(`{}`)}); resp.Status != http.StatusNotFound {
		t.Errorf("a daemon endpoint on the cloud lane answered %d %s", resp.Status, resp.Body)
	}
	direct, err := siteserver.New(siteserver.Config{Store: w.store, Keys: w.keys, VerificationURL: "https://x.example/pair"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Pump(w.ctx); err == nil {
		t.Error("the direct lane pumped")
	}
}

func TestACancelledCloudJobIsWithdrawnAndNeverSealed(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(nil)
	w.enqueue(s, "j1", "never")
	j, found, err := s.Cancel(w.ctx, "j1")
	if err != nil || !found || j.State != sitestore.StateCanceled || siteserver.FateOf(j) != site.FateCancelled {
		t.Fatalf("cancel: %+v %v %v", j, found, err)
	}
	for range 5 {
		if _, err := w.daemon.Tick(w.ctx); err != nil {
			t.Fatal(err)
		}
		if rep, err := s.Pump(w.ctx); err != nil || len(rep.Sealed) != 0 {
			t.Fatalf("pump: %+v %v", rep, err)
		}
	}
	if w.daemon.Active() != 0 || w.job("j1").State != sitestore.StateCanceled {
		t.Fatalf("a cancelled job ran: %+v", w.job("j1"))
	}
}

// The restart cases: the site dies at a moment, a new site process starts
// on the same store, and the job still ends exactly once, verified.
func TestACloudSiteRestartedOnTheSameStoreLosesNothing(t *testing.T) {
	t.Run("before the stub reached the relay", func(t *testing.T) {
		w := newCloudWorld(t)
		dead := w.start(failOn{"/enqueue"})
		w.enqueue(dead, "j1", "first") // not an error: the store has it
		if j := w.job("j1"); !j.AwaitingPublish {
			t.Fatalf("the job was marked published: %+v", j)
		}
		s := w.start(nil)
		reps := w.settle(s, w.ended("j1"))
		w.wantVerified("j1", "first")
		if endings(reps, "j1") != 1 {
			t.Fatal("not reported once")
		}
	})
	t.Run("after sealing, before the payload was posted", func(t *testing.T) {
		w := newCloudWorld(t)
		dead := w.start(failOn{"/payload"})
		w.enqueue(dead, "j1", "second")
		for range 20 {
			if _, err := w.daemon.Tick(w.ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := dead.Pump(w.ctx); err != nil {
				t.Fatal(err)
			}
			if len(w.job("j1").SealedTo) == 1 {
				break
			}
			time.Sleep(3 * time.Millisecond)
		}
		if j := w.job("j1"); len(j.SealedTo) != 1 || !j.Adopted() {
			t.Fatalf("no write-ahead seal: %+v", j)
		}
		s := w.start(nil)
		w.settle(s, w.ended("j1"))
		w.wantVerified("j1", "second")
	})
	t.Run("with the result waiting at the relay", func(t *testing.T) {
		w := newCloudWorld(t)
		dead := w.start(failOn{"/results"})
		w.enqueue(dead, "j1", "third")
		w.settle(dead, func() bool { return w.daemon.Active() == 0 && len(w.job("j1").SealedTo) == 1 && w.resultWaiting("j1") })
		if siteserver.FateOf(w.job("j1")) != "" {
			t.Fatal("ended before the restart")
		}
		s := w.start(nil)
		reps := w.settle(s, w.ended("j1"))
		w.wantVerified("j1", "third")
		if endings(reps, "j1") != 1 {
			t.Fatal("not reported once")
		}
	})
	t.Run("after completing, before the result was collected", func(t *testing.T) {
		w := newCloudWorld(t)
		first := w.start(nil)
		w.enqueue(first, "j1", "fourth")
		w.settle(first, w.ended("j1"))
		done := w.job("j1")
		// The relay still lists it: the collect rides on the next poll,
		// which this site never made.
		if !w.resultWaiting("j1") {
			t.Fatal("the relay no longer lists the result")
		}
		s := w.start(nil)
		rep, err := s.Pump(w.ctx)
		if err != nil || len(rep.Ended) != 0 || len(rep.Refused) != 0 {
			t.Fatalf("pump after restart: %+v %v", rep, err)
		}
		if again := w.job("j1"); again.UpdatedAt != done.UpdatedAt || again.State != sitestore.StateOK {
			t.Fatalf("a re-listed result was judged again: %+v", again)
		}
		if _, err := s.Pump(w.ctx); err != nil {
			t.Fatal(err)
		}
		if w.resultWaiting("j1") {
			t.Fatal("the re-listed result was not collected")
		}
	})
}

// resultWaiting asks the relay (as the site, read only) whether it lists
// a result for id.
func (w *cloudWorld) resultWaiting(id string) bool {
	w.t.Helper()
	req := relaytest.SignedSiteRequest(w.t, w.keys, "shop", "results", w.clock.Now(), nil)
	resp := w.relay.Handle(w.ctx, req)
	if resp.Status != 200 {
		w.t.Fatalf("results: %d %s", resp.Status, resp.Body)
	}
	return strings.Contains(string(resp.Body), `"jobId":"`+id+`"`)
}

// Against the relay's own rule: a job whose three claims all go unsealed
// (here, every payload post is lost) is evicted, and the site store ends it
// with the reason instead of waiting for its deadline.
func TestAnEvictedCloudJobEndsInTheStoreWithItsReason(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(failOn{"/payload"})
	w.enqueue(s, "j1", "never sealed")
	claim := protocol.ClaimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: w.device.RunnerID, Max: 1,
		Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "local", BackendID: "ollama",
			BackendClass: "http", Model: "m", OfferScope: "private"}}}
	for range store.SealAttemptsBeforeEviction {
		if resp := w.relay.Handle(w.ctx, w.device.Request(t, "claim", w.clock.Now(), claim)); resp.Status != 200 ||
			!strings.Contains(string(resp.Body), `"id":"j1"`) {
			t.Fatalf("claim: %d %s", resp.Status, resp.Body)
		}
		if rep, err := s.Pump(w.ctx); err != nil || len(rep.Ended) != 0 {
			t.Fatalf("pump while the seal is lost: %+v %v", rep, err)
		}
		w.clock.Advance(store.AwaitingPayloadMs * time.Millisecond)
		if _, err := w.relay.Sweep(w.ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Pump(w.ctx)
	if err != nil || endings([]site.Report{rep}, "j1") != 1 {
		t.Fatalf("pump after the eviction: %+v %v", rep, err)
	}
	j := w.job("j1")
	if siteserver.FateOf(j) != site.FateEvicted || j.State != sitestore.StateError || !strings.Contains(j.EndReason, "evicted") {
		t.Fatalf("evicted job: fate %s %+v", siteserver.FateOf(j), j)
	}
	if res, _, _ := s.Result(w.ctx, "j1"); res.Reason == "" || res.Outcome == nil || res.Outcome.Code != "evicted" {
		t.Fatalf("result of an evicted job: %+v", res)
	}
}

// refuseEnqueue answers every enqueue as a relay refusing the stub does.
type refuseEnqueue struct{}

func (refuseEnqueue) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/enqueue") {
		body := `{"error":"purpose-not-declared","message":"this site does not declare triage"}`
		return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestCloudAppAPISaysRelayRefusalsAndDirectOnlyCalls(t *testing.T) {
	w := newCloudWorld(t)
	s := w.start(refuseEnqueue{})
	resp := s.HandleApp(w.ctx, siteserver.Request{Method: http.MethodPost, Path: "/app/enqueue",
		Body: []byte(`{"id":"j1","kind":"llm.generate","payload":{"prompt":"x"},"owner":"alice","purpose":"triage"}`)})
	if resp.Status != http.StatusConflict || !strings.Contains(string(resp.Body), `"error":"purpose-not-declared"`) {
		t.Fatalf("enqueue the relay refused: %d %s", resp.Status, resp.Body)
	}
	j := w.job("j1")
	if siteserver.FateOf(j) != site.FateFailed || j.State != sitestore.StateError || j.AwaitingPublish || !strings.Contains(j.EndReason, "purpose-not-declared") {
		t.Fatalf("a refused stub left %+v (fate %s)", j, siteserver.FateOf(j))
	}
	resp = s.HandleApp(w.ctx, siteserver.Request{Method: http.MethodPost, Path: "/app/availability",
		Body: []byte(`{"kind":"llm.generate","owner":"alice"}`)})
	if resp.Status != http.StatusBadRequest || !strings.Contains(string(resp.Body), "cloud lane") {
		t.Fatalf("availability on the cloud lane: %d %s", resp.Status, resp.Body)
	}
}
