package site_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// hookTransport runs before(req) ahead of every request it forwards, so a
// test can make the world move between a site's read and its write.
type hookTransport struct {
	before func(r *http.Request)
}

func (h hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.before(r)
	return http.DefaultTransport.RoundTrip(r)
}

// The lost seal, against a real relay: the site reads
// pending and sees lease L1; before its payload post arrives, L1's awaiting
// window lapses and the same device (the sticky re-offer) claims again
// under L2; the post names no lease, so it lands on L2; the device runs the
// job under L2 and the relay accepts its result. The site sealed this job
// to that device and nobody else, so the result is the device's own work:
// a site that knew only L1 would refuse it, and the job would be done at
// the relay and never delivered.
func TestResultAcceptedAfterAReclaimRenewedTheLease(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(start)
	st := memory.New(store.Options{Clock: clk})
	siteFixture := relaytest.NewSite(t, "shop")
	device := relaytest.NewDaemon(t, "runner-a", "alice")
	r, err := relay.New(relay.Config{
		Store: st, Clock: clk,
		Projection: relay.NewStaticProjection(relaytest.NewFixture().
			Site(siteFixture).Device(device).Consent("alice", "shop").Projection()),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.HTTPHandler())
	t.Cleanup(srv.Close)

	daemonCall := func(endpoint string, body, out any) {
		t.Helper()
		req := device.Request(t, endpoint, clk.Now(), body)
		resp := r.Handle(ctx, req)
		if resp.Status != 200 {
			t.Fatalf("%s: %d %s", endpoint, resp.Status, resp.Body)
		}
		if err := json.Unmarshal(resp.Body, out); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() []protocol.ClaimedStub {
		t.Helper()
		var resp protocol.ClaimResponse
		daemonCall("claim", protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: device.RunnerID, Max: 1,
			Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "local", BackendID: "ollama",
				BackendClass: "http", Model: "m", OfferScope: "private"}}}, &resp)
		return resp.Jobs
	}

	var once sync.Once
	var leases []string
	hook := hookTransport{before: func(req *http.Request) {
		if !strings.HasSuffix(req.URL.Path, "/payload") {
			return
		}
		once.Do(func() {
			// Between the site's pending read and its payload post: the
			// awaiting window lapses and the same device claims again.
			clk.Advance(store.AwaitingPayloadMs*time.Millisecond + time.Second)
			again := claim()
			if len(again) != 1 {
				t.Errorf("re-claim granted %d jobs, want the job back", len(again))
				return
			}
			leases = append(leases, again[0].Lease.ID)
		})
	}}
	s, err := site.New(site.Config{RelayURL: srv.URL, SiteID: "shop", Keys: siteFixture.Keys, Clock: clk,
		HTTPClient: &http.Client{Transport: hook}, Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.Publish(ctx, stub, protocol.GeneratePayload("hello")); err != nil {
		t.Fatal(err)
	}
	first := claim()
	if len(first) != 1 {
		t.Fatalf("claim granted %d jobs", len(first))
	}
	leases = append([]string{first[0].Lease.ID}, leases...)

	rep, err := s.Pump(ctx)
	if err != nil || len(rep.Sealed) != 1 {
		t.Fatalf("pump = %+v, %v; want the payload sealed", rep, err)
	}
	if len(leases) != 2 || leases[0] == leases[1] {
		t.Fatalf("leases %v: the reproduction needs a second lease", leases)
	}

	// The device runs it under the lease it now holds.
	current := leases[1]
	var fetched protocol.FetchResponse
	daemonCall("fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: device.RunnerID, JobID: "j1", LeaseID: current}, &fetched)
	prompt, err := protocol.Open(fetched.Envelope, device.Keys, siteFixture.Public().Identity, protocol.ExpectedEnvelope{
		JobID: "j1", SenderKeyID: siteFixture.KeyID(), RecipientKeyID: device.Keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(protocol.SealedOutcome{Outcome: protocol.OKOutcome("echo: " + prompt), Ran: okRan})
	env := device.SealResult(t, "j1", string(out), siteFixture.Public(), start.Add(time.Hour).UnixMilli())
	var accepted protocol.ResultResponse
	daemonCall("result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: device.RunnerID, JobID: "j1",
		LeaseID: current, Envelope: env, Disposition: "ok"}, &accepted)
	if !accepted.Accepted {
		t.Fatalf("relay did not accept the result: %+v", accepted)
	}

	rep, err = s.Pump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].LeaseID != current || len(rep.Refused) != 0 {
		t.Fatalf("pump = %+v; want the device's result under %s delivered", rep, current)
	}
}
