package relay_test

import (
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

func TestDaemonAuthentication(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("an unsigned request is refused as not signed", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
			req.Header.Del(protocol.HeaderSignature)
			expect(t, w.do(req), 401, errBody("unauthorized", "this request is not signed"))
		})
		t.Run("an issued-at that is not a positive number is not signed", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
			req.Header.Set(protocol.HeaderIssuedAt, "soon")
			expect(t, w.do(req), 401, errBody("unauthorized", "this request is not signed"))
		})
		t.Run("a runner nobody approved is not recognised", func(t *testing.T) {
			w := newWorld(t, f)
			stranger := relaytest.NewDaemon(t, "runner-x", "alice")
			expect(t, w.daemonCall(stranger, "claim", claimBody(stranger, 1)), 401, errBody("unauthorized", "this runner is not recognised"))
		})
		t.Run("a signature by other keys fails, and does not rebuild presence", func(t *testing.T) {
			w := newWorld(t, f)
			impostor := relaytest.NewDaemon(t, w.daemon.RunnerID, "alice")
			expect(t, w.daemonCall(impostor, "claim", claimBody(impostor, 1)), 401, errBody("unauthorized", "signature check failed"))
			if _, found, _ := w.store.Presence(w.ctx, w.daemon.RunnerID); found {
				t.Fatal("presence was rebuilt before the signature verified")
			}
		})
		t.Run("a signature over other bytes fails", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
			req.Body = relaytest.Body(t, claimBody(w.daemon, 2))
			expect(t, w.do(req), 401, errBody("unauthorized", "signature check failed"))
		})
		t.Run("a signature for another endpoint fails", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "release", w.now(), claimBody(w.daemon, 1))
			req.Path = "/byollm/claim"
			expect(t, w.do(req), 401, errBody("unauthorized", "signature check failed"))
		})
		t.Run("a site-plane header does not authenticate a daemon", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
			req.Header.Set(protocol.HeaderSite, req.Header.Get(protocol.HeaderRunner))
			req.Header.Del(protocol.HeaderRunner)
			expect(t, w.do(req), 401, errBody("unauthorized", "this request is not signed"))
		})
		t.Run("a stale timestamp is clock skew with the server's time, whether or not it verifies", func(t *testing.T) {
			w := newWorld(t, f)
			for _, skew := range []time.Duration{-121 * time.Second, 121 * time.Second} {
				req := w.daemon.Request(t, "claim", w.now().Add(skew), claimBody(w.daemon, 1))
				want := `{"error":"clock-skew","message":"this request's timestamp is too far from the server's clock; check the machine's time and try again","serverTime":` + relaytest.Ms(w.now()) + `,"maxSkewMs":120000}`
				expect(t, w.do(req), 401, want)
			}
			// Inside the window is fine.
			expectStatus(t, w.do(w.daemon.Request(t, "claim", w.now().Add(-119*time.Second), claimBody(w.daemon, 1))), 200)
		})
		t.Run("a replay outside the window is stale", func(t *testing.T) {
			w := newWorld(t, f)
			req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
			expectStatus(t, w.do(req), 200)
			w.advance(120_001)
			if resp := w.do(req); resp.Status != 401 || decode[protocol.WireError](t, resp).Error != "clock-skew" {
				t.Fatalf("got %d %s", resp.Status, resp.Body)
			}
		})
		t.Run("a revoked device is refused on every endpoint, heartbeat included", func(t *testing.T) {
			w := newWorld(t, f)
			w.project(relaytest.NewFixture().Site(w.site).RevokedDevice(w.daemon).Consent("alice", "site-a"))
			revoked := errBody("revoked", "routing for this runner has been revoked")
			for endpoint, body := range map[string]any{
				"claim":     claimBody(w.daemon, 1),
				"heartbeat": heartbeatBody(w.daemon),
				"fetch":     protocol.FetchRequest{ProtocolVersion: "2", RunnerID: "runner-1", JobID: "j", LeaseID: "l"},
				"release":   protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: "runner-1", Leases: []protocol.GrantRef{}, Reason: "shutdown"},
				"result":    `{"protocolVersion":"2"}`,
			} {
				expect(t, w.daemonCall(w.daemon, endpoint, body), 403, revoked)
			}
		})
		t.Run("revoking one device leaves its owner's other devices working", func(t *testing.T) {
			w := newWorld(t, f)
			other := relaytest.NewDaemon(t, "runner-2", "alice")
			w.project(relaytest.NewFixture().Site(w.site).RevokedDevice(w.daemon).Device(other).Consent("alice", "site-a"))
			expectStatus(t, w.daemonCall(other, "claim", claimBody(other, 1)), 200)
		})
		t.Run("revocation is read from the projection on every call, not from presence", func(t *testing.T) {
			w := newWorld(t, f)
			expectStatus(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200)
			w.project(relaytest.NewFixture().Site(w.site).RevokedDevice(w.daemon).Consent("alice", "site-a"))
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 403, errBody("revoked", "routing for this runner has been revoked"))
		})
		t.Run("a body that fails the schema is refused after auth", func(t *testing.T) {
			w := newWorld(t, f)
			for _, body := range []string{
				`{"protocolVersion":"2","runnerId":"runner-1","capabilities":[],"max":0}`,
				`{"protocolVersion":"2","runnerId":"runner-1","capabilities":[],"max":65}`,
				`{"protocolVersion":"2","runnerId":"runner-1","capabilities":[],"max":1,"extra":true}`,
				`{"protocolVersion":"2","runnerId":"runner-1","capabilities":[]}`,
			} {
				expect(t, w.daemonCall(w.daemon, "claim", body), 400, errBody("bad-request", "request failed schema validation"))
			}
		})
		t.Run("a presence miss is rebuilt from the projection after the signature verifies", func(t *testing.T) {
			w := newWorld(t, f)
			pairFixture(t, w, w.daemon)
			if err := w.store.DropPresence(w.ctx, w.daemon.RunnerID); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200)
			p, found, err := w.store.Presence(w.ctx, w.daemon.RunnerID)
			if err != nil || !found {
				t.Fatalf("presence not rebuilt: %v", err)
			}
			if p.Owner != "alice" || p.Device != w.daemon.Public() || len(p.Capabilities) != 0 || len(p.Withheld) != 0 {
				t.Fatalf("rebuilt presence %+v", p)
			}
		})
		t.Run("a presence record outlives its device record", func(t *testing.T) {
			w := newWorld(t, f)
			pairFixture(t, w, w.daemon)
			w.project(relaytest.NewFixture().Site(w.site).Consent("alice", "site-a"))
			expectStatus(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200)
		})
		t.Run("the owner comes from presence, and claim names the signer only", func(t *testing.T) {
			w := newWorld(t, f)
			body := claimBody(w.daemon, 1)
			body.RunnerID = "runner-other"
			expect(t, w.daemonCall(w.daemon, "claim", body), 403, errBody("forbidden", "runner id does not match the key"))
		})
	})
}
