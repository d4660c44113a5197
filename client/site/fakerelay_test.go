package site_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
)

// fakeRelay is a site-plane relay whose answers the test writes, so the
// site's refusals can be driven with what a lying relay would send. It
// checks every request's signature against the site's key.
type fakeRelay struct {
	t       *testing.T
	siteKey protocol.PublicIdentity
	now     func() time.Time

	mu       sync.Mutex
	pending  []protocol.SitePendingJob
	results  []protocol.SiteResult
	payloads map[string]protocol.SealedEnvelope // by job id, as posted
	enqueued []protocol.JobStub
	refuse   map[string]fakeRefusal // by endpoint
	// evicted are listed to a collect (a POST to results), as byorelay does.
	evicted []string
	// collected is every id a collect named, in order.
	collected []string
	// resultsGate, when set, holds every results answer until it closes.
	resultsGate chan struct{}
}

type fakeRefusal struct {
	status int
	body   string
}

func newFakeRelay(t *testing.T, siteKey protocol.PublicIdentity, now func() time.Time) (*fakeRelay, string) {
	f := &fakeRelay{t: t, siteKey: siteKey, now: now, payloads: map[string]protocol.SealedEnvelope{}, refuse: map[string]fakeRefusal{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := strings.TrimPrefix(r.URL.Path, "/relay/site/")
	body, _ := io.ReadAll(r.Body)
	sig, err := protocol.SignatureFromHeaders(r.Header, protocol.HeaderSite)
	if err == nil {
		err = protocol.VerifySiteRequest(f.siteKey.Identity, endpoint, body, sig, f.now().UnixMilli())
	}
	if err != nil {
		f.t.Errorf("%s: bad signature: %v", endpoint, err)
		w.WriteHeader(401)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ref, ok := f.refuse[endpoint]; ok {
		w.WriteHeader(ref.status)
		_, _ = w.Write([]byte(ref.body))
		return
	}
	var out any
	switch endpoint {
	case "enqueue":
		var req protocol.EnqueueRequest
		if err := protocol.DecodeStrict(body, &req); err != nil {
			f.t.Errorf("enqueue body: %v", err)
		}
		f.enqueued = append(f.enqueued, req.Stub)
		out = protocol.JobStateResponse{JobID: req.Stub.ID, State: "queued"}
	case "payload":
		var req protocol.PayloadRequest
		if err := protocol.DecodeStrict(body, &req); err != nil {
			f.t.Errorf("payload body: %v", err)
		}
		f.payloads[req.JobID] = req.Envelope
		out = protocol.JobStateResponse{JobID: req.JobID, State: "ready"}
	case "cancel":
		out = protocol.CancelResponse{Cancelled: true}
	case "pending":
		if r.URL.Query().Get("protocolVersion") != "2" || r.URL.Query().Get("siteId") == "" {
			f.t.Errorf("pending query %q", r.URL.RawQuery)
		}
		out = protocol.SitePendingResponse{Jobs: f.pending}
	case "results":
		if gate := f.resultsGate; gate != nil {
			f.mu.Unlock()
			<-gate
			f.mu.Lock()
		}
		if r.Method == http.MethodPost {
			var req protocol.CollectRequest
			if err := protocol.DecodeStrict(body, &req); err != nil {
				f.t.Errorf("collect body: %v", err)
			}
			f.collected = append(f.collected, req.Collected...)
			out = protocol.CollectResponse{Jobs: f.results, Evicted: f.evicted}
		} else {
			out = protocol.SiteResultsResponse{Jobs: f.results}
		}
	}
	b, _ := protocol.Encode(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (f *fakeRelay) set(fn func(f *fakeRelay)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeRelay) payload(jobID string) (protocol.SealedEnvelope, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.payloads[jobID]
	return e, ok
}

var start = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

type setup struct {
	relay  *fakeRelay
	site   *site.Client
	keys   *protocol.Keys
	device *protocol.Keys
	clock  *clock.Manual
}

func newSetup(t *testing.T) setup {
	t.Helper()
	keys, device := mustKeys(t), mustKeys(t)
	clk := clock.NewManual(start)
	relay, url := newFakeRelay(t, keys.Public(), clk.Now)
	c, err := site.New(site.Config{RelayURL: url, SiteID: "shop", Keys: keys, Clock: clk,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return setup{relay: relay, site: c, keys: keys, device: device, clock: clk}
}

func mustKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// publish publishes job id for alice and has device claim it under lease.
func (s setup) publishClaimed(t *testing.T, id, lease string, p protocol.JobPayload) {
	t.Helper()
	stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: "alice", DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.site.Publish(context.Background(), stub, p); err != nil {
		t.Fatal(err)
	}
	dev := s.device.Public()
	s.relay.set(func(f *fakeRelay) {
		f.pending = append(f.pending, protocol.SitePendingJob{JobID: id, Device: &dev, RunnerID: "runner-a", LeaseID: lease,
			AwaitingUntil: start.Add(10 * time.Second).UnixMilli(), LeaseExpiresAt: start.Add(time.Minute).UnixMilli()})
	})
}

// result is what a device would report for id: outcome sealed by sealer,
// listed under lease with disposition, naming device as the signer.
func (s setup) result(t *testing.T, id, lease, disposition string, sealer *protocol.Keys, named protocol.PublicIdentity, out protocol.SealedOutcome) protocol.SiteResult {
	t.Helper()
	plaintext, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	env, err := protocol.Seal(string(plaintext), sealer, s.keys.Public().Encryption, protocol.EnvelopeContext{
		JobID: id, SenderKeyID: sealer.KeyID(), RecipientKeyID: s.keys.KeyID(),
		DeadlineAt: start.Add(24 * time.Hour).UnixMilli(), Direction: protocol.DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.SiteResult{JobID: id, Envelope: &env, Disposition: disposition, RunnerID: "runner-a",
		LeaseID: lease, Device: &named, RunnerOwner: "alice"}
}
