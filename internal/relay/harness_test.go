package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// start is where every test's clock begins.
var start = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// backend is a routing store plus its pairing codes, built fresh per test.
type backend interface {
	store.RoutingStore
	store.PairingCodes
	DropPresence(ctx context.Context, runnerID string) error
}

// storeFactory builds a fresh store for one test.
type storeFactory struct {
	name string
	new  func(t *testing.T, opts store.Options) backend
}

var factories = []storeFactory{
	{name: "memory", new: func(t *testing.T, opts store.Options) backend { return memory.New(opts) }},
	{name: "dynamo", new: newDynamoStore},
}

// newDynamoStore is a store over a fresh table on DynamoDB Local, so tests
// cannot see each other's jobs.
func newDynamoStore(t *testing.T, opts store.Options) backend {
	t.Helper()
	table := localtest.UniqueName("relay")
	client := localtest.DynamoClient(t)
	if err := dynamo.CreateTable(context.Background(), client, table); err != nil {
		t.Fatal(err)
	}
	s, err := dynamo.New(dynamo.Config{DB: client, Table: table, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eachStore runs test once per store implementation: every relay behaviour
// is asserted against the memory store and against DynamoDB Local alike.
func eachStore(t *testing.T, test func(t *testing.T, f storeFactory)) {
	t.Helper()
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) { test(t, f) })
	}
}

// world is one test's relay: a store, a clock both share, a projection the
// test replaces at will, one registered site and one approved daemon whose
// owner consented to it.
type world struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock.Manual
	store  backend
	proj   *relay.StaticProjection
	relay  *relay.Relay
	cfg    relay.Config
	logs   *bytes.Buffer
	site   *relaytest.Site
	daemon *relaytest.Daemon
}

// newWorld builds a world; configure edits the relay's Config before New.
func newWorld(t *testing.T, f storeFactory, configure ...func(*relay.Config)) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), clock: clock.NewManual(start), logs: &bytes.Buffer{}}
	w.store = f.new(t, store.Options{Clock: w.clock})
	w.site = relaytest.NewSite(t, "site-a")
	w.daemon = relaytest.NewDaemon(t, "runner-1", "alice")
	w.proj = relay.NewStaticProjection(relaytest.NewFixture().
		Site(w.site).Device(w.daemon).Consent("alice", "site-a").Projection())
	w.cfg = relay.Config{
		Store:           w.store,
		Pairing:         w.store,
		VerificationURL: "https://control.example/pair",
		Projection:      w.proj,
		Clock:           w.clock,
		Logger:          slog.New(slog.NewJSONHandler(w.logs, nil)),
	}
	for _, c := range configure {
		c(&w.cfg)
	}
	r, err := relay.New(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.relay = r
	return w
}

// project replaces the projection: a control-plane push.
func (w *world) project(b *relaytest.FixtureBuilder) {
	w.t.Helper()
	w.proj.Set(b.Projection())
}

// base is the fixture newWorld starts from, to extend.
func (w *world) base() *relaytest.FixtureBuilder {
	return relaytest.NewFixture().Site(w.site).Device(w.daemon)
}

func (w *world) now() time.Time { return w.clock.Now() }
func (w *world) nowMs() int64   { return w.clock.Now().UnixMilli() }
func (w *world) advance(ms int64) {
	w.clock.Advance(time.Duration(ms) * time.Millisecond)
}

func (w *world) do(req relay.Request) relay.Response {
	w.t.Helper()
	return w.relay.Handle(w.ctx, req)
}

// daemonCall is a request signed by d now.
func (w *world) daemonCall(d *relaytest.Daemon, endpoint string, body any) relay.Response {
	w.t.Helper()
	return w.do(d.Request(w.t, endpoint, w.now(), body))
}

// siteCall is a request signed by s now.
func (w *world) siteCall(s *relaytest.Site, endpoint string, body any) relay.Response {
	w.t.Helper()
	return w.do(s.Request(w.t, endpoint, w.now(), body))
}

// expect asserts a status and the exact body bytes.
func expect(t *testing.T, resp relay.Response, status int, body string) {
	t.Helper()
	if resp.Status != status || string(resp.Body) != body {
		t.Fatalf("got %d %s\nwant %d %s", resp.Status, resp.Body, status, body)
	}
}

// expectJSON asserts the status and the JSON content-type.
func expectStatus(t *testing.T, resp relay.Response, status int) {
	t.Helper()
	if resp.Status != status {
		t.Fatalf("got %d %s, want %d", resp.Status, resp.Body, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
}

// errBody is the {error, message} refusal body as the reference writes it.
func errBody(code, message string) string {
	b, _ := protocol.Encode(protocol.NewWireError(code, message))
	return string(b)
}

func decode[T any](t *testing.T, resp relay.Response) T {
	t.Helper()
	var v T
	// Wire shapes are decoded as strictly as a daemon or site would, so an
	// answer the reference's schema would refuse fails here too.
	if strict, isWire := any(&v).(protocol.Validator); isWire {
		if err := protocol.DecodeStrict(resp.Body, strict); err != nil {
			t.Fatalf("decode %s: %v", resp.Body, err)
		}
		return v
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", resp.Body, err)
	}
	return v
}

func encodeJS(t *testing.T, v any) string {
	t.Helper()
	b, err := protocol.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deadline is a job deadline an hour out.
func (w *world) deadline() int64 { return w.nowMs() + 3_600_000 }

// enqueue publishes a stub for owner from site s and asserts it queued.
func (w *world) enqueue(s *relaytest.Site, id, owner string) protocol.JobStub {
	w.t.Helper()
	stub := s.Stub(id, owner, w.deadline())
	resp := w.siteCall(s, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: s.SiteID, Stub: stub})
	expect(w.t, resp, 200, `{"jobId":"`+id+`","state":"queued"}`)
	return stub
}

// capabilities is a one-row matrix for kind.
func capabilities(kind string) []protocol.Capability {
	return []protocol.Capability{{
		Kind: kind, Service: "local", BackendID: "ollama", BackendClass: "http",
		Model: "llama3", OfferScope: "private",
	}}
}

func claimBody(d *relaytest.Daemon, max int64) protocol.ClaimRequest {
	return protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: d.RunnerID, Capabilities: capabilities("llm.generate"), Max: max}
}

// claim asks for up to max jobs as d and returns what was granted.
func (w *world) claim(d *relaytest.Daemon, max int64) []protocol.ClaimedStub {
	w.t.Helper()
	resp := w.daemonCall(d, "claim", claimBody(d, max))
	expectStatus(w.t, resp, 200)
	return decode[protocol.ClaimResponse](w.t, resp).Jobs
}

// seal has site s seal jobID to the device that claimed it.
func (w *world) seal(s *relaytest.Site, jobID string, to protocol.PublicIdentity) {
	w.t.Helper()
	env := s.Seal(w.t, jobID, "prompt", to, w.deadline())
	resp := w.siteCall(s, "payload", protocol.PayloadRequest{ProtocolVersion: "2", SiteID: s.SiteID, JobID: jobID, Envelope: env})
	expect(w.t, resp, 200, `{"jobId":"`+jobID+`","state":"ready"}`)
}

func heartbeatBody(d *relaytest.Daemon, leases ...protocol.GrantRef) protocol.HeartbeatRequest {
	if leases == nil {
		leases = []protocol.GrantRef{}
	}
	return protocol.HeartbeatRequest{
		ProtocolVersion: "2", RunnerID: d.RunnerID, DaemonVersion: "0.1.1",
		Capabilities: capabilities("llm.generate"), Withheld: []protocol.WithheldKind{}, ActiveLeases: leases,
	}
}

func ref(job protocol.ClaimedStub) protocol.GrantRef {
	return protocol.GrantRef{JobID: job.ID, LeaseID: job.Lease.ID}
}

// noSecretsLogged asserts the logs carry no ciphertext and no signature.
func (w *world) noSecretsLogged(secrets ...string) {
	w.t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(w.logs.String(), s) {
			w.t.Fatalf("log holds %q", s)
		}
	}
}

// get is an unsigned request.
func get(method, path, query string, body []byte) relay.Request {
	return relay.Request{Method: method, Path: path, RawQuery: query, Header: http.Header{}, Body: body}
}

var _ = projection.Fixture{}

func storeOptions() store.Options { return store.Options{Clock: clock.NewManual(start)} }

// rebuild makes a new relay over the same store, clock and projection.
func (w *world) rebuild(configure func(*relay.Config)) {
	w.t.Helper()
	configure(&w.cfg)
	r, err := relay.New(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.relay = r
}

func decodeNoFatal(resp relay.Response) protocol.ClaimResponse {
	var v protocol.ClaimResponse
	_ = json.Unmarshal(resp.Body, &v)
	return v
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
