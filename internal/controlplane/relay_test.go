package controlplane_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

var _ relay.ProjectionSource = (*controlplane.Store)(nil)

// daemon talks to a relay the way a byollm daemon does.
type daemon struct {
	t       *testing.T
	relay   *relay.Relay
	clock   clock.Clock
	keys    *protocol.Keys
	runner  string
	caps    []protocol.Capability
	lastRaw string
}

func (d *daemon) post(endpoint string, body any, signed bool) (int, []byte) {
	d.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		d.t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if signed {
		protocol.SignRequest(d.keys, endpoint, d.runner, d.clock.Now().UnixMilli(), raw).SetHeaders(h, protocol.HeaderRunner)
	}
	resp := d.relay.Handle(d.t.Context(), relay.Request{Method: "POST", Path: "/byollm/" + endpoint, Header: h, Body: raw})
	d.lastRaw = string(resp.Body)
	return resp.Status, resp.Body
}

func (d *daemon) claim() (int, protocol.ClaimResponse) {
	d.t.Helper()
	status, body := d.post("claim", protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: d.runner, Capabilities: d.caps, Max: 4}, true)
	var res protocol.ClaimResponse
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &res); err != nil {
			d.t.Fatal(err)
		}
	}
	return status, res
}

// The done-when, with the real relay: the relay reads its
// projection through one Store and the admin API writes through another
// (two instances; with DynamoDB, two clients), and every change is in force
// on the relay's very next request.
func TestAdminChangesHoldOnTheRelaysVeryNextRequest(t *testing.T) {
	for _, tc := range storages {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			relayStorage, adminStorage := tc.pair(t)
			clk := clock.NewManual(time.Now())
			routing := memory.New(store.Options{Clock: clk})
			rl, err := relay.New(relay.Config{
				Store: routing, Pairing: routing, VerificationURL: "https://control.example/approve",
				Projection: controlplane.NewStore(relayStorage), Clock: clk,
			})
			if err != nil {
				t.Fatal(err)
			}
			admin := controlplane.NewAdmin(controlplane.AdminConfig{
				Store: controlplane.NewStore(adminStorage), Pairings: routing, Clock: clk,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			srv := httptest.NewServer(controlplane.AdminHandler(admin))
			defer srv.Close()
			api := controlplane.NewClient(srv.URL, srv.Client())

			siteKeys := newKeys(t)
			if _, err := api.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: "site-a", Site: siteKeys.Public()}); err != nil {
				t.Fatal(err)
			}
			consent := controlplane.ConsentRequest{Owner: "alice", SiteID: "site-a"}
			if _, err := api.Consent(ctx, controlplane.ConsentAdd, consent); err != nil {
				t.Fatal(err)
			}

			// Pairing: start, approve by user code through the API, poll.
			d := &daemon{t: t, relay: rl, clock: clk, keys: newKeys(t), caps: []protocol.Capability{{
				Kind: "llm.chat", Service: "ollama", BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: "private",
			}}}
			status, body := d.post("pair", protocol.PairStartRequest{
				ProtocolVersion: "2", Action: "start",
				Daemon: protocol.DaemonInfo{Version: "0.1.1", Label: "laptop", Platform: "linux"},
				Device: d.keys.Public(), Capabilities: d.caps,
			}, false)
			var start protocol.PairStartResponse
			if status != http.StatusOK || json.Unmarshal(body, &start) != nil {
				t.Fatalf("pair start: %d %s", status, body)
			}
			poll := protocol.PairPollRequest{ProtocolVersion: "2", Action: "poll", DeviceCode: start.DeviceCode}
			if _, body := d.post("pair", poll, false); string(body) != `{"status":"pending"}` {
				t.Fatalf("poll before approval: %s", body)
			}
			approved, err := api.Approve(ctx, controlplane.ApproveRequest{UserCode: start.UserCode, Owner: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			_, body = d.post("pair", poll, false)
			var pollRes protocol.PairPollResponse
			if err := protocol.DecodeStrict(body, &pollRes); err != nil || pollRes.Status != "approved" || pollRes.RunnerID != approved.Device.RunnerID || pollRes.Owner != "alice" {
				t.Fatalf("poll after approval: %s", body)
			}
			if _, ok := pollRes.Sites.Get(siteKeys.KeyID()); !ok {
				t.Fatalf("approved pairing does not pin the consented site: %s", body)
			}
			d.runner = pollRes.RunnerID

			// A queued job for alice at site-a.
			if _, err := routing.Enqueue(ctx, store.EnqueueInput{ID: "job-1", SiteID: "site-a", Stub: protocol.JobStub{
				ID: "job-1", Kind: "llm.chat", Owner: "alice", Site: siteKeys.KeyID(), Audience: "private",
				SizeClass: "small", DeadlineAt: clk.Now().Add(time.Hour).UnixMilli(),
			}}); err != nil {
				t.Fatal(err)
			}

			// Pause: the very next claim has no route to it.
			if _, err := api.Consent(ctx, controlplane.ConsentPause, consent); err != nil {
				t.Fatal(err)
			}
			if status, res := d.claim(); status != http.StatusOK || len(res.Jobs) != 0 {
				t.Fatalf("claim under a paused consent: %d %s", status, d.lastRaw)
			}
			// Resume: the very next claim gets it.
			if _, err := api.Consent(ctx, controlplane.ConsentResume, consent); err != nil {
				t.Fatal(err)
			}
			if status, res := d.claim(); status != http.StatusOK || len(res.Jobs) != 1 || res.Jobs[0].ID != "job-1" {
				t.Fatalf("claim after resume: %d %s", status, d.lastRaw)
			}

			// Revoke: the device's very next request is refused.
			if _, err := api.RevokeDevice(ctx, d.runner); err != nil {
				t.Fatal(err)
			}
			status, _ = d.claim()
			var refusal protocol.WireError
			if status != http.StatusForbidden || json.Unmarshal([]byte(d.lastRaw), &refusal) != nil || refusal.Error != "revoked" {
				t.Fatalf("claim after revocation: %d %s", status, d.lastRaw)
			}
		})
	}
}
