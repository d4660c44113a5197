package relay_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// snapshot is everything a refused request could have changed.
type snapshot struct {
	Jobs     []store.Job
	Presence []store.Presence
}

func (w *world) snapshot() snapshot {
	w.t.Helper()
	jobs, err := w.store.Jobs(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	everyone, err := w.store.Everyone(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return snapshot{Jobs: jobs, Presence: everyone}
}

// TestNoRefusedRequestChangesState sends malformed, oversized, unsigned,
// stale, replayed and cross-tenant requests at a relay with work in flight
// and checks every one is refused with a protocol error body and leaves the
// store exactly as it was.
func TestNoRefusedRequestChangesState(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		other := relaytest.NewSite(t, "site-b")
		bob := relaytest.NewDaemon(t, "runner-bob", "bob")
		w.project(w.base().Site(other).Device(bob).Consent("alice", "site-a").Consent("bob", "site-b"))
		pairFixture(t, w, w.daemon)
		pairFixture(t, w, bob)
		w.enqueue(w.site, "held", "alice")
		w.enqueue(w.site, "queued", "alice")
		held := w.claim(w.daemon, 1)[0]
		w.seal(w.site, "held", w.daemon.Public())
		grant := ref(held)
		result := w.daemon.SealResult(t, "held", "answer", w.site.Public(), w.deadline())
		huge := result
		huge.Ciphertext = strings.Repeat("A", protocol.MaxEnvelopeBytes)
		replayed := w.site.Request(t, "cancel", w.now(), protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "queued"})
		// Past the replayed request's freshness window, heartbeating so the
		// held lease does not lapse by itself while the refusals are sent.
		for _, ms := range []int64{50_000, 50_000, 21_000} {
			w.advance(ms)
			got := decode[protocol.HeartbeatResponse](t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, grant)))
			if len(got.Lost) != 0 {
				t.Fatalf("lost %+v", got.Lost)
			}
		}
		before := w.snapshot()

		unsignedDaemon := func(endpoint string, body any) relay.Request {
			r := w.daemon.Request(t, endpoint, w.now(), body)
			r.Header.Del(protocol.HeaderSignature)
			return r
		}
		refused := map[string]relay.Request{
			"result, unsigned":           unsignedDaemon("result", resultBody(w.daemon, grant, result)),
			"result, stale":              w.daemon.Request(t, "result", w.now().Add(-5*time.Minute), resultBody(w.daemon, grant, result)),
			"result, by another runner":  bob.Request(t, "result", w.now(), resultBody(bob, grant, result)),
			"result, stale lease":        w.daemon.Request(t, "result", w.now(), resultBody(w.daemon, protocol.GrantRef{JobID: "held", LeaseID: "old"}, result)),
			"result, malformed":          w.daemon.Request(t, "result", w.now(), `{"protocolVersion":"2","runnerId":"runner-1"}`),
			"release, by another runner": bob.Request(t, "release", w.now(), releaseBody(bob, "refused", grant)),
			"release, malformed":         w.daemon.Request(t, "release", w.now(), `{"protocolVersion":"2"}`),
			"claim, as somebody else":    w.daemon.Request(t, "claim", w.now(), claimBody(bob, 4)),
			"claim, unsigned":            unsignedDaemon("claim", claimBody(w.daemon, 4)),
			"heartbeat, malformed":       w.daemon.Request(t, "heartbeat", w.now(), `{"protocolVersion":"2","runnerId":"runner-1"}`),
			"heartbeat, wrong key":       relaytest.SignedDaemonRequest(t, bob.Keys, "runner-1", "heartbeat", w.now(), heartbeatBody(w.daemon)),
			"heartbeat, no version":      w.daemon.Request(t, "heartbeat", w.now(), `{"runnerId":"runner-1"}`),
			"fetch, by another runner":   bob.Request(t, "fetch", w.now(), fetchBody(bob, grant)),
			"cancel, replayed":           replayed,
			"cancel, cross-tenant":       other.Request(t, "cancel", w.now(), protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "queued"}),
			"enqueue, cross-tenant stub": other.Request(t, "enqueue", w.now(), enqueueBody(other, w.site.Stub("new", "bob", w.deadline()))),
			"enqueue, malformed":         w.site.Request(t, "enqueue", w.now(), `{"protocolVersion":"2","siteId":"site-a","stub":{"id":"x"}}`),
			"payload, cross-tenant":      other.Request(t, "payload", w.now(), protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "held", Envelope: result}),
			"payload, too late":          w.site.Request(t, "payload", w.now(), protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "held", Envelope: result}),
			"pair, unapproved":           get("POST", "/byollm/pair", "", relaytest.Body(t, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: relaytest.NewDaemon(t, "x", "alice").Public()})),
			"pending, cross-tenant": func() relay.Request {
				r := other.Request(t, "pending", w.now(), nil)
				r.RawQuery = "siteId=site-a&protocolVersion=2"
				return r
			}(),
		}
		// The ceiling is checked before any store call; six megabytes are
		// built once, on the memory run.
		if f.name == "memory" {
			refused["result, oversized"] = w.daemon.Request(t, "result", w.now(), resultBody(w.daemon, grant, huge))
			refused["payload, oversized"] = w.site.Request(t, "payload", w.now(), protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "held", Envelope: huge})
		}
		for name, req := range refused {
			t.Run(name, func(t *testing.T) {
				resp := w.do(req)
				if name == "release, by another runner" {
					// Not a refusal on the wire (a release skips what it
					// cannot resolve), and still nothing moves.
					expect(t, resp, 200, `{"released":[]}`)
				} else {
					var body protocol.WireError
					if err := protocol.DecodeStrict(resp.Body, &body); err != nil {
						t.Fatalf("not a protocol error body: %d %s (%v)", resp.Status, resp.Body, err)
					}
					if resp.Status != protocol.StatusOf(body.Error) {
						t.Fatalf("%d for %s", resp.Status, body.Error)
					}
				}
				if after := w.snapshot(); !reflect.DeepEqual(after, before) {
					b, _ := json.Marshal(before)
					a, _ := json.Marshal(after)
					t.Fatalf("state changed\nbefore %s\nafter  %s", b, a)
				}
			})
		}
	})
}
