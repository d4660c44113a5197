package peers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// goDaemon is the smallest daemon that can serve through a relay, written
// with the protocol package: pair by device code, claim, fetch and open
// the payload, seal a result back.
type goDaemon struct {
	w        *peers.World
	keys     *protocol.Keys
	runnerID string
	site     protocol.PublicIdentity // pinned at pairing
}

const goModel = "go-model"

var goCapabilities = []protocol.Capability{{
	Kind: "llm.generate", Service: "primary", BackendID: "openai-http", BackendClass: "http",
	Model: goModel, OfferScope: "private",
}}

// pairGoDaemon runs the device-code flow and pins the site it is handed.
func pairGoDaemon(t *testing.T, w *peers.World) *goDaemon {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	var started protocol.PairStartResponse
	call(t, w.Origin, unsigned(t, "pair", protocol.PairStartRequest{
		ProtocolVersion: pv(), Action: "start",
		Daemon:       protocol.DaemonInfo{Version: "0.0.0-test", Label: "go-daemon", Platform: "linux"},
		Device:       keys.Public(),
		Capabilities: goCapabilities,
	}), &started)
	dev := w.Approve(t, started.UserCode)

	var poll protocol.PairPollResponse
	eventually(t, "approval of "+started.UserCode, func() bool {
		call(t, w.Origin, unsigned(t, "pair", protocol.PairPollRequest{
			ProtocolVersion: pv(), Action: "poll", DeviceCode: started.DeviceCode,
		}), &poll)
		return poll.Status != protocol.PairPending
	})
	if poll.Status != protocol.PairApproved || poll.Owner != owner || poll.RunnerID != dev.Device.RunnerID {
		t.Fatalf("poll answered %+v", poll)
	}
	site, ok := poll.Sites.Get(w.Site.KeyID())
	if !ok || site != w.Site.Public() || len(poll.Sites) != 1 {
		t.Fatalf("pairing handed sites %+v, want only %s", poll.Sites, w.Site.KeyID())
	}
	return &goDaemon{w: w, keys: keys, runnerID: poll.RunnerID, site: site}
}

func (d *goDaemon) request(t *testing.T, endpoint string, body any) relay.Request {
	t.Helper()
	return relaytest.SignedDaemonRequest(t, d.keys, d.runnerID, endpoint, time.Now(), body)
}

// claim waits for one job.
func (d *goDaemon) claim(t *testing.T) protocol.ClaimedStub {
	t.Helper()
	var claimed protocol.ClaimResponse
	eventually(t, "a job to claim", func() bool {
		call(t, d.w.Origin, d.request(t, "claim", protocol.ClaimRequest{
			ProtocolVersion: pv(), RunnerID: d.runnerID, Capabilities: goCapabilities, Max: 1,
		}), &claimed)
		return len(claimed.Jobs) > 0
	})
	return claimed.Jobs[0]
}

// fetch waits for the site to seal the payload (409 not-ready until then),
// then opens it against the site key pinned at pairing.
func (d *goDaemon) fetch(t *testing.T, job protocol.ClaimedStub) string {
	t.Helper()
	var fetched protocol.FetchResponse
	eventually(t, "the payload of "+job.ID, func() bool {
		code, body := send(t, d.w.Origin, d.request(t, "fetch", protocol.FetchRequest{
			ProtocolVersion: pv(), RunnerID: d.runnerID, JobID: job.ID, LeaseID: job.Lease.ID,
		}))
		switch {
		case code == http.StatusOK:
			if err := json.Unmarshal(body, &fetched); err != nil {
				t.Fatalf("fetch: %s: %v", body, err)
			}
			return true
		case code == http.StatusConflict && strings.Contains(string(body), `"not-ready"`):
			return false
		default:
			t.Fatalf("fetch: %d %s", code, body)
			return false
		}
	})
	plain, err := protocol.Open(fetched.Envelope, d.keys, d.site.Identity, protocol.ExpectedEnvelope{
		JobID: job.ID, SenderKeyID: job.Site, RecipientKeyID: d.keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil {
		t.Fatalf("the payload does not open and verify at the device: %v", err)
	}
	return plain
}

// result seals an ok outcome with text back to the pinned site.
func (d *goDaemon) result(t *testing.T, job protocol.ClaimedStub, text string) protocol.ResultResponse {
	t.Helper()
	var out sealedOutcome
	out.Outcome.Outcome, out.Outcome.Text = "ok", text
	out.Ran.Model, out.Ran.BackendClass, out.Ran.DurationMs = goModel, "http", 1
	plain, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	env, err := protocol.Seal(string(plain), d.keys, d.site.Encryption, protocol.EnvelopeContext{
		JobID: job.ID, SenderKeyID: d.keys.KeyID(), RecipientKeyID: job.Site,
		DeadlineAt: time.Now().UnixMilli() + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	var resp protocol.ResultResponse
	call(t, d.w.Origin, d.request(t, "result", protocol.ResultRequest{
		ProtocolVersion: pv(), RunnerID: d.runnerID, JobID: job.ID, LeaseID: job.Lease.ID,
		Envelope: env, Disposition: "ok",
	}), &resp)
	return resp
}

// unsigned is a POST to the daemon plane with no signature: pairing is the
// one exchange that establishes an identity rather than using one.
func unsigned(t *testing.T, endpoint string, body any) relay.Request {
	t.Helper()
	return relay.Request{
		Method: http.MethodPost, Path: relaytest.BasePath + "/" + endpoint,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   relaytest.Body(t, body),
	}
}
