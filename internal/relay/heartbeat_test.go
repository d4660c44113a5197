package relay_test

import (
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

func TestHeartbeat(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("names the pinned sites and the server's time, in the reference's key order", func(t *testing.T) {
			w := newWorld(t, f)
			resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon))
			want := `{"sites":{"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":` + relaytest.Ms(w.now()) + `}`
			expect(t, resp, 200, want)
			decode[protocol.HeartbeatResponse](t, resp)
		})
		t.Run("records presence with the matrix, replacing the old one", func(t *testing.T) {
			w := newWorld(t, f)
			body := heartbeatBody(w.daemon)
			body.Withheld = []protocol.WithheldKind{{Kind: "llm.chat", Claimants: []protocol.Claimant{{Service: "a", Offer: "private"}, {Service: "b", Offer: "private"}}}}
			expectStatus(t, w.daemonCall(w.daemon, "heartbeat", body), 200)
			p, found, _ := w.store.Presence(w.ctx, "runner-1")
			if !found || len(p.Capabilities) != 1 || len(p.Withheld) != 1 || p.LastSeenAt != w.nowMs() {
				t.Fatalf("presence %+v", p)
			}
			w.advance(5_000)
			expectStatus(t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon)), 200)
			p, _, _ = w.store.Presence(w.ctx, "runner-1")
			if len(p.Withheld) != 0 || p.LastSeenAt != w.nowMs() {
				t.Fatalf("presence %+v", p)
			}
		})
		t.Run("renews the leases it names, so a long job keeps one lease", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			w.seal(w.site, "job-1", w.daemon.Public())
			expectStatus(t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, ref(job))), 200)
			for range 3 {
				w.advance(50_000)
				resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, ref(job)))
				if got := decode[protocol.HeartbeatResponse](t, resp); len(got.Lost) != 0 {
					t.Fatalf("lost %+v", got.Lost)
				}
			}
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.State != "running" || stored.ClaimedBy.LeaseID != job.Lease.ID || stored.ClaimedBy.LeaseExpiresAt != w.nowMs()+60_000 {
				t.Fatalf("job %+v", stored)
			}
		})
		t.Run("without heartbeats the lease lapses, and the next beat reports it lost", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			w.seal(w.site, "job-1", w.daemon.Public())
			w.advance(60_000)
			resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, ref(job)))
			want := `{"sites":{"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `},"awaitingConsent":[],"cancel":[],"lost":[` + encodeJS(t, ref(job)) + `],"serverTime":` + relaytest.Ms(w.now()) + `}`
			expect(t, resp, 200, want)
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.State != "queued" || stored.ClaimedBy != nil {
				t.Fatalf("job %+v", stored)
			}
		})
		t.Run("a lease it does not hold is lost", func(t *testing.T) {
			w := newWorld(t, f)
			bogus := protocol.GrantRef{JobID: "job-x", LeaseID: "lease-x"}
			got := decode[protocol.HeartbeatResponse](t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, bogus)))
			if len(got.Lost) != 1 || got.Lost[0] != bogus {
				t.Fatalf("lost %+v", got.Lost)
			}
		})
		t.Run("tells the holder what the site cancelled", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			expect(t, w.siteCall(w.site, "cancel", protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1"}), 200, `{"cancelled":true}`)
			got := decode[protocol.HeartbeatResponse](t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, ref(job))))
			if len(got.Cancel) != 1 || got.Cancel[0] != ref(job) {
				t.Fatalf("cancel %+v", got.Cancel)
			}
		})
		t.Run("a paused site stays pinned and is named as awaiting consent", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			w.project(w.base().Paused("alice", "site-a"))
			resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, ref(job)))
			want := `{"sites":{"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `},"awaitingConsent":["` + w.site.KeyID() + `"],"cancel":[],"lost":[],"serverTime":` + relaytest.Ms(w.now()) + `}`
			expect(t, resp, 200, want)
		})
		t.Run("with nothing left to serve every lease is lost and nothing renewed", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			w.siteCall(w.site, "cancel", protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1"})
			w.project(w.base().Consent("alice", "site-a").Revoke("alice", "site-a"))
			resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, ref(job)))
			want := `{"sites":{},"awaitingConsent":[],"cancel":[],"lost":[` + encodeJS(t, ref(job)) + `],"serverTime":` + relaytest.Ms(w.now()) + `}`
			expect(t, resp, 200, want)
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.ClaimedBy == nil || stored.ClaimedBy.LeaseExpiresAt != job.Lease.ExpiresAt {
				t.Fatalf("the lease moved: %+v", stored.ClaimedBy)
			}
		})
		t.Run("a rotated site carries its succession chain and window", func(t *testing.T) {
			w := newWorld(t, f)
			old := w.site.Public()
			rotated := w.site.Rotate(t, w.nowMs()+60_000)
			w.project(relaytest.NewFixture().SiteRecord(rotated).Device(w.daemon).Consent("alice", "site-a"))
			resp := w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon))
			succession := protocol.SiteSuccession{Succeeds: rotated.Succeeds, RetiringUntil: rotated.RetiringUntil}
			want := `{"sites":{"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `},"successions":{"` + w.site.KeyID() + `":` + encodeJS(t, succession) +
				`},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":` + relaytest.Ms(w.now()) + `}`
			expect(t, resp, 200, want)
			if rotated.Succeeds[0].Identity != old {
				t.Fatal("the chain does not link the old key")
			}
		})
		t.Run("offers an update only when configured and the daemon can read it", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.UpdateOffer = "0.2.0" })
			got := decode[protocol.HeartbeatResponse](t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon)))
			if got.UpdateTo != "0.2.0" {
				t.Fatalf("updateTo %q", got.UpdateTo)
			}
			old := heartbeatBody(w.daemon)
			old.DaemonVersion = "0.1.0-alpha.82"
			if got := decode[protocol.HeartbeatResponse](t, w.daemonCall(w.daemon, "heartbeat", old)); got.UpdateTo != "" {
				t.Fatalf("offered to a daemon that cannot read it: %q", got.UpdateTo)
			}
		})
		t.Run("a daemon below the floor is refused with the floor named", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.DaemonFloor = "0.1.1" })
			old := heartbeatBody(w.daemon)
			old.DaemonVersion = "0.1.0"
			want := `{"error":"daemon-below-floor","message":"byollm 0.1.0 is below the supported floor (0.1.1). Run ` + "`npm i -g byollm@latest`, then `byollm start`." + `","floor":"0.1.1"}`
			expect(t, w.daemonCall(w.daemon, "heartbeat", old), 426, want)
			expectStatus(t, w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon)), 200)
		})
		t.Run("the alpha.40 paused field is an unknown key now", func(t *testing.T) {
			w := newWorld(t, f)
			body := `{"protocolVersion":"2","runnerId":"runner-1","daemonVersion":"0.1.1","capabilities":[],"activeLeases":[],"paused":false}`
			expect(t, w.daemonCall(w.daemon, "heartbeat", body), 400, errBody("bad-request", "request failed schema validation"))
		})
	})
}
