package site_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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

// refusingTransport answers every payload post with a 503 before it reaches
// the relay: a site too slow to seal, as far as the relay can tell.
type refusingTransport struct{}

func (refusingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/payload") {
		return &http.Response{StatusCode: 503, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Against a real relay: a job whose three claims all go unsealed is
// evicted, and the site is told so instead of waiting for its deadline;
// told once, and the notice is collected.
func TestASiteThatNeverSealsIsToldItsJobWasEvicted(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(start)
	st := memory.New(store.Options{Clock: clk})
	siteFixture := relaytest.NewSite(t, "shop")
	device := relaytest.NewDaemon(t, "runner-a", "alice")
	r, err := relay.New(relay.Config{Store: st, Clock: clk,
		Projection: relay.NewStaticProjection(relaytest.NewFixture().
			Site(siteFixture).Device(device).Consent("alice", "shop").Projection())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.HTTPHandler())
	t.Cleanup(srv.Close)
	s, err := site.New(site.Config{RelayURL: srv.URL, SiteID: "shop", Keys: siteFixture.Keys, Clock: clk,
		HTTPClient: &http.Client{Transport: refusingTransport{}}, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		DeadlineAt: start.Add(time.Hour).UnixMilli()}
	if _, err := s.Publish(ctx, stub, protocol.GeneratePayload("hello")); err != nil {
		t.Fatal(err)
	}
	claim := protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: device.RunnerID, Max: 1,
		Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "local", BackendID: "ollama",
			BackendClass: "http", Model: "m", OfferScope: "private"}}}
	for range store.SealAttemptsBeforeEviction {
		if resp := r.Handle(ctx, device.Request(t, "claim", clk.Now(), claim)); resp.Status != 200 ||
			!strings.Contains(string(resp.Body), `"id":"j1"`) {
			t.Fatalf("claim: %d %s", resp.Status, resp.Body)
		}
		if rep, err := s.Pump(ctx); err != nil || rep.Deferred == "" || len(rep.Ended) != 0 {
			t.Fatalf("pump while the seal fails = %+v, %v", rep, err)
		}
		clk.Advance(store.AwaitingPayloadMs * time.Millisecond)
		if _, err := r.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Pump(ctx)
	if err != nil || len(rep.Ended) != 1 || rep.Ended[0].Fate != site.FateEvicted || s.Pending() != 0 {
		t.Fatalf("pump after eviction = %+v, %v; want j1 evicted", rep, err)
	}
	if again, _ := s.Pump(ctx); len(again.Ended) != 0 {
		t.Fatalf("told twice: %+v", again)
	}
	if ids, _ := st.Evicted(ctx, "shop"); len(ids) != 0 {
		t.Fatalf("notice not collected: %v", ids)
	}
}
