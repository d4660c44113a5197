package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// stack is the local stack as CI runs it: every function of template.yaml
// behind the local API server, over a fresh table in DynamoDB Local, with a
// short lease so a dead device's job comes back in seconds. The control
// plane is driven through its admin API, as a person would.
type stack struct {
	t     *testing.T
	ctx   context.Context
	url   string
	admin *controlplane.Admin
	// streams: daemons paired from now on opt in to live streams.
	streams bool
}

func startStack(t *testing.T, leaseMs int64) *stack {
	t.Helper()
	ctx := context.Background()
	st := peers.OpenStack(t, lambdafn.Env{
		LeaseMs: leaseMs, MetricsNamespace: "byorelay",
		VerificationURL: "http://control.invalid/approve",
	})
	srv, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Relay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	timings := &timings{byPath: map[string]*timing{}}
	ts := httptest.NewServer(timings.wrap(withSSE(r, srv)))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { t.Log(timings.String()) })
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: slog.New(slog.DiscardHandler)})
	return &stack{t: t, ctx: ctx, url: ts.URL, admin: admin}
}

// newSite registers a site with fresh keys.
func (s *stack) newSite(siteID string) *site.Client {
	s.t.Helper()
	keys := mustKeys(s.t)
	if _, _, err := s.admin.RegisterSite(s.ctx, siteID, keys.Public()); err != nil {
		s.t.Fatal(err)
	}
	c, err := site.New(site.Config{RelayURL: s.url, SiteID: siteID, Keys: keys, RetryBackoff: 50 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func (s *stack) consent(owner string, siteIDs ...string) {
	s.t.Helper()
	for _, id := range siteIDs {
		if _, _, err := s.admin.AddConsent(s.ctx, owner, id); err != nil {
			s.t.Fatal(err)
		}
	}
}

// device is a Go daemon on the stack, with a network it can lose.
type device struct {
	*daemon.Daemon
	runnerID string
	keys     *protocol.Keys
	net      *cuttable
	events   *recorder
}

// pair builds a daemon and pairs it through the device-code flow, the
// control plane approving its user code as owner.
func (s *stack) pair(owner, runnerID string, backend daemon.Backend) *device {
	s.t.Helper()
	keys := mustKeys(s.t)
	net := &cuttable{next: http.DefaultTransport}
	rec := &recorder{}
	d, err := daemon.New(daemon.Config{
		RelayURL: s.url, Keys: keys, Backend: backend, Concurrency: 8,
		HeartbeatInterval: 500 * time.Millisecond,
		HTTPClient:        &http.Client{Transport: net, Timeout: 20 * time.Second},
		OnEvent:           rec.add,
		Streams:           daemon.Streaming{Enabled: s.streams, FlushEvery: 40 * time.Millisecond},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	codes := make(chan daemon.PairCode, 1)
	done := make(chan error, 1)
	go func() {
		_, err := d.Pair(s.ctx, runnerID, func(c daemon.PairCode) { codes <- c })
		done <- err
	}()
	select {
	case c := <-codes:
		if _, _, err := s.admin.ApprovePairing(s.ctx, c.UserCode, owner, runnerID); err != nil {
			s.t.Fatal(err)
		}
	case err := <-done:
		s.t.Fatalf("pairing %s ended before a code: %v", runnerID, err)
	}
	if err := <-done; err != nil {
		s.t.Fatalf("pairing %s: %v", runnerID, err)
	}
	return &device{Daemon: d, runnerID: runnerID, keys: keys, net: net, events: rec}
}

// cuttable is a transport that can stop answering, the way a machine that
// loses power stops: no release, no goodbye.
type cuttable struct {
	next http.RoundTripper
	cut  atomic.Bool
}

var errCut = errors.New("network cut")

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.next.RoundTrip(r)
}

// recorder keeps a daemon's events.
type recorder struct {
	mu     sync.Mutex
	events []daemon.Event
}

func (r *recorder) add(e daemon.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []daemon.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]daemon.Event(nil), r.events...)
}

func (r *recorder) has(typ daemon.EventType, jobID string) bool {
	for _, e := range r.all() {
		if e.Type == typ && e.JobID == jobID {
			return true
		}
	}
	return false
}

// hangingBackend echoes, except that prompts containing "hang" are held
// until the job's context ends: a device stuck mid-job.
type hangingBackend struct{ daemon.EchoBackend }

func (b hangingBackend) Run(ctx context.Context, prompt string) (daemon.Answer, error) {
	for i := 0; i+4 <= len(prompt); i++ {
		if prompt[i:i+4] == "hang" {
			<-ctx.Done()
			return daemon.Answer{}, &daemon.BackendError{Code: "canceled", Message: "the job was canceled"}
		}
	}
	return b.EchoBackend.Run(ctx, prompt)
}

func mustKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// timings counts requests and their time by path, so a slow run says where
// the time went.
type timings struct {
	mu     sync.Mutex
	byPath map[string]*timing
}

type timing struct {
	n     int
	total time.Duration
	worst time.Duration
}

func (tm *timings) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		next.ServeHTTP(w, r)
		took := time.Since(began)
		tm.mu.Lock()
		defer tm.mu.Unlock()
		t := tm.byPath[r.URL.Path]
		if t == nil {
			t = &timing{}
			tm.byPath[r.URL.Path] = t
		}
		t.n++
		t.total += took
		t.worst = max(t.worst, took)
	})
}

func (tm *timings) String() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	paths := make([]string, 0, len(tm.byPath))
	for p := range tm.byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	b.WriteString("requests by path (count, mean, worst):")
	for _, p := range paths {
		t := tm.byPath[p]
		fmt.Fprintf(&b, "\n  %-22s %5d %8v %8v", p, t.n, (t.total / time.Duration(t.n)).Round(time.Millisecond), t.worst.Round(time.Millisecond))
	}
	return b.String()
}
