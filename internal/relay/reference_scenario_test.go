package relay_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

// refWorld is the scenario's cast, shared by both sides.
type refWorld struct {
	t        *testing.T
	clock    *clock.Manual
	site     *relaytest.Site
	other    *relaytest.Site
	alice    *relaytest.Daemon
	bob      *relaytest.Daemon
	stranger *relaytest.Daemon
}

func newRefWorld(t *testing.T) *refWorld {
	return &refWorld{
		t:        t,
		clock:    clock.NewManual(start),
		site:     relaytest.NewSite(t, "site-a"),
		other:    relaytest.NewSite(t, "site-b"),
		alice:    relaytest.NewDaemon(t, "runner-alice", "alice"),
		bob:      relaytest.NewDaemon(t, "runner-bob", "bob"),
		stranger: relaytest.NewDaemon(t, "runner-stranger", "alice"),
	}
}

func (w *refWorld) now() time.Time  { return w.clock.Now() }
func (w *refWorld) deadline() int64 { return start.UnixMilli() + 24*3_600_000 }

// fixed is a step whose request does not depend on the side.
func fixed(name string, req func() relay.Request) refStep {
	return refStep{name: name, req: func(*refSide) relay.Request { return req() }}
}

func (w *refWorld) daemon(name string, d *relaytest.Daemon, endpoint string, body func(s *refSide) any) refStep {
	return refStep{name: name, req: func(s *refSide) relay.Request { return d.Request(w.t, endpoint, w.now(), body(s)) }}
}

func (w *refWorld) siteStep(name string, site *relaytest.Site, endpoint string, body func(s *refSide) any) refStep {
	return refStep{name: name, req: func(s *refSide) relay.Request { return site.Request(w.t, endpoint, w.now(), body(s)) }}
}

func constant(v any) func(*refSide) any { return func(*refSide) any { return v } }

func (w *refWorld) grant(d *relaytest.Daemon, jobID string) func(s *refSide) protocol.GrantRef {
	return func(s *refSide) protocol.GrantRef { return protocol.GrantRef{JobID: jobID, LeaseID: s.leases[jobID]} }
}

// differs is a fixed step where this relay deliberately answers status
// and body, and the reference refStatus with refCode.
func differs(name string, req func() relay.Request, body string, refStatus int, refCode string) refStep {
	step := fixed(name, req)
	step.differs = &refDifference{status: http.StatusBadRequest, body: body, refStatus: refStatus, refCode: refCode}
	return step
}

// badBody is this relay's bad-request answer with message.
func badBody(message string) string {
	return `{"error":"bad-request","message":` + strconv.Quote(message) + `}`
}

const bomMessage = "body starts with a byte-order mark; send the JSON object without one"

func unsigned(method, path, query, body string) func() relay.Request {
	return func() relay.Request {
		return relay.Request{Method: method, Path: path, RawQuery: query, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
	}
}

func TestDifferentialAgainstTheReference(t *testing.T) {
	w := newRefWorld(t)
	base := func() *relaytest.FixtureBuilder {
		return relaytest.NewFixture().Site(w.site, w.other).Device(w.alice).Consent("alice", "site-a")
	}
	fixture := base().Build()
	withBob := base().Device(w.bob).Consent("bob", "site-a").Roster("team", "alice", "bob").Build()
	paused := relaytest.NewFixture().Site(w.site, w.other).Device(w.alice, w.bob).Paused("alice", "site-a").Consent("bob", "site-a").Build()
	revokedDevice := relaytest.NewFixture().Site(w.site, w.other).RevokedDevice(w.alice).Device(w.bob).Consent("alice", "site-a").Build()

	stub := w.site.Stub("job-1", "alice", w.deadline())
	stub2 := w.site.Stub("job-2", "alice", w.deadline())
	stub2.Purpose = "summarise"
	bobStub := w.site.Stub("job-bob", "bob", w.deadline())
	bobStub.Audience = "team"
	foreign := w.site.Stub("job-x", "alice", w.deadline())
	foreign.Site = w.other.KeyID()
	payload := w.site.Seal(t, "job-1", "the prompt", w.alice.Public(), w.deadline())
	result := w.alice.SealResult(t, "job-1", "the answer", w.site.Public(), w.deadline())
	huge := payload
	huge.Ciphertext = strings.Repeat("A", protocol.MaxEnvelopeBytes)
	broken := w.alice.Public()
	broken.EncryptionSig = w.bob.Public().EncryptionSig

	claim := func(d *relaytest.Daemon, max int64) func(*refSide) any {
		return constant(claimBody(d, max))
	}
	heartbeat := func(d *relaytest.Daemon, version string, jobs ...string) func(*refSide) any {
		return func(s *refSide) any {
			b := heartbeatBody(d)
			b.DaemonVersion = version
			for _, j := range jobs {
				b.ActiveLeases = append(b.ActiveLeases, protocol.GrantRef{JobID: j, LeaseID: s.leases[j]})
			}
			return b
		}
	}
	fetch := func(d *relaytest.Daemon, job string) func(*refSide) any {
		return func(s *refSide) any { return fetchBody(d, w.grant(d, job)(s)) }
	}
	pairFix := func(owner string, d protocol.PublicIdentity) func() relay.Request {
		return unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: owner, Device: d})))
	}
	poll := func(s *refSide) relay.Request {
		return unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, pollBody(s.code))))()
	}
	withUnsignedHeader := func(r relay.Request) relay.Request {
		r.Header.Del(protocol.HeaderSignature)
		return r
	}

	steps := []refStep{
		fixed("an unknown path", unsigned("GET", "/healthz", "", "")),
		fixed("a daemon name outside the base path", unsigned("POST", "/literally/anything/claim", "", `{"protocolVersion":"2"}`)),
		fixed("no version", unsigned("POST", "/byollm/claim", "", `{"runnerId":"x"}`)),
		fixed("an old version", unsigned("POST", "/byollm/claim", "", `{"protocolVersion":"1"}`)),
		fixed("a newer version in the query", unsigned("GET", "/relay/site/pending", "protocolVersion=99", "")),
		fixed("a numeric version", unsigned("POST", "/relay/site/enqueue", "", `{"protocolVersion":2}`)),
		differs("malformed JSON", unsigned("POST", "/byollm/heartbeat", "", `{"protocolVersion":"2"`),
			badBody("body is not valid JSON: it ends at offset 22 inside its value"), 400, "unsupported-protocol-version"),
		differs("bytes after a versioned body", unsigned("POST", "/byollm/claim", "", `{"protocolVersion":"2"} {}`),
			badBody("body has bytes after its JSON value at offset 24"), 400, "unsupported-protocol-version"),
		differs("an array body", unsigned("POST", "/relay/site/enqueue", "", `[{"protocolVersion":"2"}]`),
			badBody("body must be a JSON object, got an array"), 400, "unsupported-protocol-version"),
		differs("null, with the version in the query", unsigned("POST", "/byollm/pair", "protocolVersion=2", `null`),
			badBody("body must be a JSON object, got null"), 400, "bad-request"),
		fixed("an unknown versioned path", unsigned("POST", "/byollm/nope", "", `{"protocolVersion":"2"}`)),
		fixed("a nested claim path, unsigned", unsigned("POST", "/byollm/x/claim", "", `{"protocolVersion":"2"}`)),
		fixed("debug without a site", unsigned("GET", "/debug", "", "")),
		fixed("debug for an unknown site", unsigned("GET", "/byollm/debug", "site=nope", "")),
		fixed("pair: malformed", unsigned("POST", "/byollm/pair", "", `{"protocolVersion":"2","owner":"alice"}`)),
		fixed("pair: inconsistent identity", pairFix("alice", broken)),
		fixed("pair: no consent", pairFix("dave", w.alice.Public())),
		fixed("pair: unapproved device", pairFix("alice", w.stranger.Public())),
		fixed("pair: fixture", pairFix("alice", w.alice.Public())),
		// A leading BOM: the reference reads the body as text, which drops
		// it, and checks the signature over that text; this relay refuses
		// it before anything else, signed or not.
		differs("pair: fixture behind a BOM", func() relay.Request {
			r := pairFix("alice", w.alice.Public())()
			r.Body = append([]byte("\xef\xbb\xbf"), r.Body...)
			return r
		}, badBody(bomMessage), 200, ""),
		differs("a BOM the signer hashed", func() relay.Request {
			return w.alice.Request(t, "heartbeat", w.now(), append([]byte("\xef\xbb\xbf"), relaytest.Body(t, heartbeatBody(w.alice))...))
		}, badBody(bomMessage), 401, "unauthorized"),
		differs("a BOM the signer did not hash", func() relay.Request {
			r := w.alice.Request(t, "heartbeat", w.now(), heartbeatBody(w.alice))
			r.Body = append([]byte("\xef\xbb\xbf"), r.Body...)
			return r
		}, badBody(bomMessage), 200, ""),
		differs("a site body with a BOM the signer hashed", func() relay.Request {
			return w.site.Request(t, "cancel", w.now(), append([]byte("\xef\xbb\xbf"),
				relaytest.Body(t, protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-none"})...))
		}, badBody(bomMessage), 401, "unauthorized"),
		// Bytes after the value, signed over exactly what was sent and with
		// the version in the query: the reference authenticates it and
		// refuses it as a schema failure, the same 400 bad-request.
		differs("a signed body with bytes after it", func() relay.Request {
			r := w.alice.Request(t, "heartbeat", w.now(), append(relaytest.Body(t, heartbeatBody(w.alice)), " x"...))
			r.RawQuery = "protocolVersion=2"
			return r
		}, badBody("body has bytes after its JSON value at offset "+strconv.Itoa(len(relaytest.Body(t, heartbeatBody(w.alice)))+1)), 400, "bad-request"),
		fixed("pair: start", unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, startBody(w.bob))))),
		{name: "pair: poll pending", req: poll},
		fixed("pair: poll unknown", unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, pollBody("a-code-nobody-ever-minted-here"))))),
		fixed("pair: start with a bad identity", func() relay.Request {
			b := startBody(w.bob)
			b.Device = broken
			return unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, b)))()
		}),
		{project: &withBob},
		{name: "pair: poll approved", req: poll},
		{name: "pair: poll spent", req: poll},
		{name: "claim: unsigned header", req: func(*refSide) relay.Request {
			return withUnsignedHeader(w.alice.Request(t, "claim", w.now(), claimBody(w.alice, 1)))
		}},
		fixed("claim: stale", func() relay.Request {
			return w.alice.Request(t, "claim", w.now().Add(-3*time.Minute), claimBody(w.alice, 1))
		}),
		fixed("claim: unknown runner", func() relay.Request { return w.stranger.Request(t, "claim", w.now(), claimBody(w.stranger, 1)) }),
		fixed("claim: wrong key", func() relay.Request {
			return relaytest.SignedDaemonRequest(t, w.bob.Keys, w.alice.RunnerID, "claim", w.now(), claimBody(w.alice, 1))
		}),
		w.daemon("claim: runner mismatch", w.alice, "claim", constant(claimBody(w.bob, 1))),
		w.daemon("claim: schema", w.alice, "claim", constant(`{"protocolVersion":"2","runnerId":"runner-alice","capabilities":[],"max":0}`)),
		w.daemon("claim: empty queue", w.alice, "claim", claim(w.alice, 1)),
		fixed("enqueue: unsigned", func() relay.Request {
			return withUnsignedHeader(w.site.Request(t, "enqueue", w.now(), enqueueBody(w.site, stub)))
		}),
		fixed("enqueue: unregistered", func() relay.Request {
			return relaytest.NewSite(t, "site-z").Request(t, "enqueue", w.now(), enqueueBody(w.site, stub))
		}),
		fixed("enqueue: stale", func() relay.Request {
			return w.site.Request(t, "enqueue", w.now().Add(time.Hour), enqueueBody(w.site, stub))
		}),
		w.siteStep("enqueue: another site in the body", w.site, "enqueue", constant(enqueueBody(w.other, stub))),
		w.siteStep("enqueue: a stub naming another site", w.site, "enqueue", constant(enqueueBody(w.site, foreign))),
		w.siteStep("enqueue: schema", w.site, "enqueue", constant(`{"protocolVersion":"2","siteId":"site-a","stub":{}}`)),
		w.siteStep("enqueue", w.site, "enqueue", constant(enqueueBody(w.site, stub))),
		w.siteStep("enqueue a second", w.site, "enqueue", constant(enqueueBody(w.site, stub2))),
		w.siteStep("enqueue bob's", w.site, "enqueue", constant(enqueueBody(w.site, bobStub))),
		w.siteStep("payload before a claim", w.site, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: payload})),
		w.siteStep("pending: nothing claimed", w.site, "pending", constant(nil)),
		w.daemon("claim: alice, roster and cap", w.alice, "claim", claim(w.alice, 8)),
		w.siteStep("enqueue: republish while claimed", w.site, "enqueue", constant(enqueueBody(w.site, stub))),
		w.daemon("fetch: not ready", w.alice, "fetch", fetch(w.alice, "job-1")),
		w.daemon("fetch: stale lease", w.alice, "fetch", constant(fetchBody(w.alice, protocol.GrantRef{JobID: "job-1", LeaseID: "old"}))),
		w.daemon("fetch: not the holder", w.bob, "fetch", fetch(w.bob, "job-1")),
		w.daemon("fetch: unknown", w.alice, "fetch", constant(fetchBody(w.alice, protocol.GrantRef{JobID: "nope", LeaseID: "x"}))),
		w.siteStep("pending", w.site, "pending", constant(nil)),
		w.siteStep("payload: too large", w.site, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: huge})),
		w.siteStep("payload: another site's job", w.other, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-b", JobID: "job-1", Envelope: payload})),
		w.siteStep("payload", w.site, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: payload})),
		w.siteStep("payload again", w.site, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: payload})),
		w.daemon("fetch", w.alice, "fetch", fetch(w.alice, "job-1")),
		// Every device here consents to the one site, so the page is the
		// same on both sides; with other tenants about, this relay's page
		// deliberately shows fewer (see debug.go).
		fixed("debug page", unsigned("GET", "/byollm/debug", "site=site-a", "")),
		{advance: 5_000},
		w.daemon("heartbeat", w.alice, "heartbeat", heartbeat(w.alice, "0.1.1", "job-1", "job-2")),
		w.daemon("heartbeat: below the floor", w.alice, "heartbeat", heartbeat(w.alice, "0.0.4")),
		w.daemon("heartbeat: too old for the offer", w.alice, "heartbeat", heartbeat(w.alice, "0.1.0-alpha.82")),
		w.daemon("heartbeat: unparseable version", w.alice, "heartbeat", heartbeat(w.alice, "banana")),
		w.daemon("result: not the holder", w.bob, "result", func(s *refSide) any { return resultBody(w.bob, w.grant(w.alice, "job-1")(s), result) }),
		w.daemon("result", w.alice, "result", func(s *refSide) any { return resultBody(w.alice, w.grant(w.alice, "job-1")(s), result) }),
		w.daemon("result: replay", w.alice, "result", func(s *refSide) any { return resultBody(w.alice, w.grant(w.alice, "job-1")(s), result) }),
		w.daemon("fetch: finished", w.alice, "fetch", fetch(w.alice, "job-1")),
		w.siteStep("results", w.site, "results", constant(nil)),
		fixed("results: another site's id", func() relay.Request {
			r := w.site.Request(t, "results", w.now(), nil)
			r.RawQuery = "siteId=site-b&protocolVersion=2"
			return r
		}),
		w.siteStep("cancel: someone else's", w.other, "cancel", constant(protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-b", JobID: "job-2"})),
		w.siteStep("cancel", w.site, "cancel", constant(protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-2"})),
		w.daemon("heartbeat: cancel", w.alice, "heartbeat", heartbeat(w.alice, "0.1.1", "job-2")),
		w.daemon("release: shutdown", w.alice, "release", func(s *refSide) any {
			return releaseBody(w.alice, "shutdown", w.grant(w.alice, "job-2")(s), w.grant(w.alice, "job-1")(s))
		}),
		w.daemon("release: bad reason", w.alice, "release", constant(releaseBody(w.alice, "bored"))),
		{advance: 10_000},
		w.siteStep("pending: after the awaiting window", w.site, "pending", constant(nil)),
		w.siteStep("payload: too late", w.site, "payload", constant(protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-bob", Envelope: payload})),
		{project: &paused},
		w.daemon("heartbeat: paused", w.alice, "heartbeat", heartbeat(w.alice, "0.1.1")),
		w.daemon("claim: paused", w.alice, "claim", claim(w.alice, 8)),
		w.daemon("heartbeat: bob, roster gone", w.bob, "heartbeat", heartbeat(w.bob, "0.1.1")),
		{project: &revokedDevice},
		w.daemon("claim: revoked device", w.alice, "claim", claim(w.alice, 1)),
		{drop: "runner-bob"},
		w.daemon("claim: presence rebuilt from the projection", w.bob, "claim", claim(w.bob, 1)),
		{drop: "runner-stranger"},
		fixed("claim: nothing to rebuild from", func() relay.Request { return w.stranger.Request(t, "claim", w.now(), claimBody(w.stranger, 1)) }),
		w.daemon("heartbeat: bob, nothing consented", w.bob, "heartbeat", heartbeat(w.bob, "0.1.1", "job-bob")),
	}
	runDifferential(t, refConfig{VerificationURL: "https://control.example/pair", UpdateOffer: "0.2.0", DaemonFloor: "0.0.5", Debug: true}, fixture, w.clock, steps)
}

func TestDifferentialGrantsAndRotation(t *testing.T) {
	w := newRefWorld(t)
	fixture := relaytest.NewFixture().Site(w.site).Device(w.alice).Consent("alice", "site-a").Build()
	stubWith := func(id, purpose string) protocol.EnqueueRequest {
		s := w.site.Stub(id, "alice", w.deadline())
		s.Purpose = purpose
		return enqueueBody(w.site, s)
	}
	oldKeys := w.site.Keys
	rotated := w.site.Rotate(t, start.UnixMilli()+60_000)
	afterRotation := relaytest.NewFixture().SiteRecord(rotated).Device(w.alice).Consent("alice", "site-a").Build()
	cancelBody := protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-ok"}
	oldCancel := fixed("cancel signed by the retiring key", func() relay.Request {
		return relaytest.SignedSiteRequest(t, oldKeys, "site-a", "cancel", w.now(), cancelBody)
	})
	enqueueOld := func(name string, req protocol.EnqueueRequest) refStep {
		return fixed(name, func() relay.Request {
			return relaytest.SignedSiteRequest(t, oldKeys, "site-a", "enqueue", w.now(), req)
		})
	}
	// Stubs before the rotation name the old key, which is what the site
	// signs with until the projection moves.
	oldStub := func(id, purpose string) protocol.EnqueueRequest {
		s := w.site.Stub(id, "alice", w.deadline())
		s.Site = oldKeys.KeyID()
		s.Purpose = purpose
		return protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: s}
	}
	steps := []refStep{
		fixed("pair: carries the control plane key", func() relay.Request {
			return unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: w.alice.Public()})))()
		}),
		fixed("pair: device-code flow unsupported", func() relay.Request {
			return unsigned("POST", "/byollm/pair", "", string(relaytest.Body(t, startBody(w.bob))))()
		}),
		enqueueOld("enqueue: not declared", oldStub("j-undeclared", "undeclared")),
		enqueueOld("enqueue: unmapped", oldStub("j-unmapped", "unmapped")),
		enqueueOld("enqueue: waiting", oldStub("j-waiting", "waiting")),
		enqueueOld("enqueue: the check fails", oldStub("j-throws", "throws")),
		enqueueOld("enqueue: ok", oldStub("job-ok", "chat")),
		enqueueOld("enqueue: declined for now", oldStub("job-decline", "")),
		enqueueOld("enqueue: declined for good", oldStub("job-decline-permanent", "")),
		w.daemon("claim: grants and declines", w.alice, "claim", constant(claimBody(w.alice, 8))),
		{advance: 29_000},
		w.daemon("claim: the lapsed grant is re-offered, the declined job waits out its not-before", w.alice, "claim", constant(claimBody(w.alice, 8))),
		{advance: 1_000},
		w.daemon("claim: after the not-before the declined job is asked about, and declined, again", w.alice, "claim", constant(claimBody(w.alice, 8))),
		{project: &afterRotation},
		w.daemon("heartbeat: successions", w.alice, "heartbeat", constant(heartbeatBody(w.alice))),
		oldCancel,
		w.siteStep("cancel signed by the current key", w.site, "cancel", constant(cancelBody)),
		enqueueOld("enqueue signed by the old key naming the old key", oldStub("job-old", "")),
		enqueueOld("enqueue signed by the old key naming the current key", stubWith("job-new", "")),
		w.daemon("claim: stubs naming the retired key are declined for now, the new one granted", w.alice, "claim", constant(claimBody(w.alice, 8))),
		{advance: 30_000},
		oldCancel,
	}
	runDifferential(t, refConfig{ControlPlanePublic: "cp-public-key", Grants: true, Satisfiable: true}, fixture, w.clock, steps)
}

var _ = projection.Fixture{}
