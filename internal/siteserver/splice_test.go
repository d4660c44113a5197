package siteserver_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// runBackend is a model that samples: each run's text carries its own
// nonce ("<nonce>00 <nonce>01 …"), so a text made of two runs shows it.
// With dieAfter set it says that many words, then nothing more until its
// context ends: a device that died mid-answer.
type runBackend struct {
	nonce    string
	words    int
	dieAfter int
	said     atomic.Int32
}

func (b *runBackend) word(i int) string { return fmt.Sprintf("%s%02d ", b.nonce, i) }

func (b *runBackend) text(n int) string {
	var s strings.Builder
	for i := range n {
		s.WriteString(b.word(i))
	}
	return s.String()
}

func (b *runBackend) Info() daemon.BackendInfo { return daemon.EchoBackend{}.Info() }

func (b *runBackend) Run(ctx context.Context, prompt string) (daemon.Answer, error) {
	return b.RunStream(ctx, prompt, func(string) {})
}

func (b *runBackend) RunStream(ctx context.Context, _ string, delta func(string)) (daemon.Answer, error) {
	for i := range b.words {
		if b.dieAfter > 0 && i == b.dieAfter {
			<-ctx.Done()
			return daemon.Answer{}, &daemon.BackendError{Code: "canceled", Message: "gone"}
		}
		delta(b.word(i))
		b.said.Add(1)
		time.Sleep(2 * time.Millisecond)
	}
	return daemon.Answer{Text: b.text(b.words), Stop: "end"}, nil
}

// cuttable is a device's network: once cut, nothing it sends arrives.
type cuttable struct{ cut atomic.Bool }

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("the device is gone")
	}
	return http.DefaultTransport.RoundTrip(r)
}

func nonce(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}

// browser is an EventSource: it reads the stream page's events as they
// arrive, keeps the last event id, and shows the text the way the demo
// page does (deltas appended; `restart` clears it; `result` replaces it).
type browser struct {
	mu     sync.Mutex
	shown  string
	lastID string
	events []string // event names in order ("" for a delta)
	done   chan struct{}
}

func openBrowser(ctx context.Context, t *testing.T, url, lastEventID string) *browser {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream page: HTTP %d", resp.StatusCode)
	}
	b := &browser{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		defer resp.Body.Close()
		lines := bufio.NewScanner(resp.Body)
		name, id := "", ""
		for lines.Scan() {
			line := lines.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				var d struct{ Text string }
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d)
				b.mu.Lock()
				b.events = append(b.events, name)
				switch name {
				case "":
					b.shown += d.Text
				case "restart":
					b.shown = ""
				case "result":
					b.shown = d.Text
				}
				if id != "" {
					b.lastID = id
				}
				b.mu.Unlock()
				name, id = "", ""
			}
		}
	}()
	return b
}

func (b *browser) view() (shown, lastID string, events []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shown, b.lastID, append([]string(nil), b.events...)
}

// last is the browser's terminal event, "" if none.
func last(events []string) string {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i] != "" {
			return events[i]
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A job streams on device A, A dies after a checkpoint of its text, its
// lease lapses, and device B runs the job again and says something else.
// No reader is ever shown a text made of both runs as a finished answer:
// each ends with exactly the verified result, or says it restarted, or
// that it went stale. The readers: the process that checkpointed A's text
// (stale), a fresh Client.Stream and a fresh StreamHandler (B's text, from
// its start), a browser that was attached before the re-claim and resumes
// with Last-Event-ID (told the answer restarted, then B's text), and one
// that stayed attached (the result).
func TestAReRunStreamIsNeverShownSpliced(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(cloudStart)
	shop := relaytest.NewSite(t, "shop")
	devA := relaytest.NewDaemon(t, "runner-a", "alice")
	devB := relaytest.NewDaemon(t, "runner-b", "alice")
	r, err := relay.New(relay.Config{Store: memory.New(store.Options{Clock: clk}), Clock: clk,
		Projection: relay.NewStaticProjection(relaytest.NewFixture().
			Site(shop).Device(devA, devB).Consent("alice", "shop").Projection())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.HTTPHandler())
	t.Cleanup(srv.Close)
	siteStore := sitememory.New(sitememory.Options{Clock: clk})

	device := func(dev *relaytest.Daemon, backend *runBackend) (*daemon.Daemon, *cuttable) {
		net := &cuttable{}
		d, err := daemon.New(daemon.Config{RelayURL: srv.URL, Keys: dev.Keys, Clock: clk,
			HTTPClient: &http.Client{Transport: net},
			Pairing:    daemon.Pairing{RunnerID: dev.RunnerID, Owner: dev.Owner},
			Backend:    backend, Streams: daemon.Streaming{Enabled: true, FlushEvery: 20 * time.Millisecond},
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
		t.Cleanup(func() {
			stop, cancel := context.WithCancel(ctx)
			cancel()
			_ = d.Shutdown(stop)
		})
		return d, net
	}
	runA := &runBackend{nonce: nonce(t), words: 60, dieAfter: 30}
	runB := &runBackend{nonce: nonce(t), words: 60}
	daemonA, netA := device(devA, runA)
	daemonB, _ := device(devB, runB)
	startHearing := func(h *heard) *siteserver.Server {
		s, err := siteserver.New(siteserver.Config{Store: siteStore, Keys: shop.Keys,
			Cloud: &siteserver.CloudLane{RelayURL: srv.URL, SiteID: "shop"}, OnStreamFault: h.hear})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	start := func() *siteserver.Server { return startHearing(&heard{}) }
	pageOf := func(s *siteserver.Server) string {
		h, err := s.StreamHandler(func(*http.Request, string) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		page := httptest.NewServer(h)
		t.Cleanup(page.Close)
		return page.URL + "/stream?job=j"
	}
	settle := func(d *daemon.Daemon, s *siteserver.Server, done func() bool) {
		t.Helper()
		waitFor(t, "the world to settle", func() bool {
			if _, err := d.Tick(ctx); err != nil {
				t.Fatalf("tick: %v", err)
			}
			if _, err := s.Pump(ctx); err != nil {
				t.Fatalf("pump: %v", err)
			}
			return done()
		})
	}

	sealer := start()
	payload, _ := json.Marshal(map[string]string{"prompt": "say something"})
	if _, err := sealer.Enqueue(ctx, siteserver.EnqueueInput{ID: "j", Kind: protocol.KindGenerate, Payload: payload,
		Owner: "alice", Streaming: true, TTLMs: 10 * 60_000}); err != nil {
		t.Fatal(err)
	}
	textA := runA.text(runA.dieAfter)

	// Device A claims the job, is sealed to, and says its 30 words. A
	// site process reads the stream (and checkpoints it); two browsers
	// read it through the stream page.
	settle(daemonA, sealer, func() bool { return runA.said.Load() == int32(runA.dieAfter) })
	type read struct {
		text string
		err  error
	}
	var checkpointer struct {
		mu   sync.Mutex
		text string
	}
	checkpointed := make(chan read, 1)
	leaseA := jobOf(t, siteStore, "j").StreamGrant.LeaseID
	readingHeard := &heard{}
	reading := startHearing(readingHeard)
	go func() {
		var got strings.Builder
		var last error
		for delta, err := range reading.Stream(ctx, "j") {
			got.WriteString(delta)
			checkpointer.mu.Lock()
			checkpointer.text = got.String()
			checkpointer.mu.Unlock()
			last = err
		}
		checkpointed <- read{got.String(), last}
	}()
	dropCtx, drop := context.WithCancel(ctx)
	defer drop()
	resuming := openBrowser(dropCtx, t, pageOf(start()), "")
	attached := openBrowser(ctx, t, pageOf(start()), "")
	waitFor(t, "A's text at every reader", func() bool {
		checkpointer.mu.Lock()
		defer checkpointer.mu.Unlock()
		r, _, _ := resuming.view()
		a, _, _ := attached.view()
		return checkpointer.text == textA && r == textA && a == textA
	})
	// One browser's connection drops; EventSource will resume with the
	// last id it was sent.
	drop()
	<-resuming.done
	_, resumeID, _ := resuming.view()
	if resumeID == "" {
		t.Fatal("the stream page sent no event id")
	}

	// A dies: nothing more from it, ever. Its lease lapses.
	netA.cut.Store(true)
	clk.Advance(time.Duration(store.DefaultLeaseMs+1_000) * time.Millisecond)
	var first read
	select {
	case first = <-checkpointed:
	case <-time.After(30 * time.Second):
		t.Fatal("the reading process did not hear that A's stream stopped")
	}
	if !errors.Is(first.err, site.ErrStreamStale) || first.text != textA {
		t.Fatalf("the process reading A's stream ended with %q, %v; want A's %q and stale", first.text, first.err, textA)
	}
	// It heard why: A's lease, not tampering, not the relay.
	if faults, _ := readingHeard.seen(); len(faults) != 1 || faults[0].Kind != site.FaultLease || faults[0].LeaseID != leaseA {
		t.Fatalf("the process reading A's stream heard %+v; want one lease fault for %s", faults, leaseA)
	}

	// B runs the job again, under a new lease, and says something else.
	settle(daemonB, sealer, func() bool { return siteserver.FateOf(jobOf(t, siteStore, "j")) != "" })
	result := runB.text(runB.words)
	if j := jobOf(t, siteStore, "j"); siteserver.FateOf(j) != site.FateVerified || j.Outcome.TextOrEmpty() != result {
		t.Fatalf("the job ended %s with %q; want B's %q", siteserver.FateOf(j), j.Outcome.TextOrEmpty(), result)
	}

	// A fresh reader: B's text, whole, and complete.
	var fresh strings.Builder
	var freshErr error
	for delta, err := range start().Stream(ctx, "j") {
		fresh.WriteString(delta)
		freshErr = err
	}
	if freshErr != nil || fresh.String() != result {
		t.Errorf("a fresh Client.Stream read %q, %v; want the verified result %q", fresh.String(), freshErr, result)
	}

	// A fresh browser: B's text, then end.
	page := openBrowser(ctx, t, pageOf(start()), "")
	<-page.done
	if shown, _, events := page.view(); shown != result || last(events) != "end" || contains(events, "restart") {
		t.Errorf("a fresh browser was shown %q (events %q); want the verified result %q and end", shown, events, result)
	}

	// The browser that dropped resumes with the id of A's text: it is told
	// the answer restarted and gets B's text from its start.
	resumed := openBrowser(ctx, t, pageOf(start()), resumeID)
	<-resumed.done
	shown, _, events := resumed.view()
	if !contains(events, "restart") || shown != result || last(events) != "end" {
		t.Errorf("the browser resuming at %s after the re-claim shows %q (events %q); want a restart and the verified result %q",
			resumeID, shown, events, result)
	}
	if !strings.HasPrefix(shown, runB.nonce) {
		t.Errorf("the resumed browser shows %q", shown)
	}

	// The browser that stayed attached: A's text went stale, then the
	// result replaced it.
	<-attached.done
	if shown, _, events := attached.view(); shown != result || last(events) != "result" {
		t.Errorf("the attached browser was shown %q (events %q); want the result %q", shown, events, result)
	}
}

func jobOf(t *testing.T, s sitestore.Store, id string) sitestore.Job {
	t.Helper()
	j, found, err := s.Get(context.Background(), id)
	if err != nil || !found {
		t.Fatalf("job %s: found=%v err=%v", id, found, err)
	}
	return j
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
