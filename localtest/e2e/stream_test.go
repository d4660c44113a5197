package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// withSSE serves the stream lane's SSE attach straight from the relay, as
// the function URL does when deployed (byorelay serve does the same).
func withSSE(r *relay.Relay, gateway http.Handler) http.Handler {
	sse := r.HTTPHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		if hr.URL.Path == seal.StreamAttachPath && strings.Contains(hr.Header.Get("Accept"), "text/event-stream") {
			sse.ServeHTTP(w, hr)
			return
		}
		gateway.ServeHTTP(w, hr)
	})
}

// A Go daemon streams a dripping answer through byorelay on DynamoDB Local
// (SSE over the local API server), and the Go site reads it as it grows:
// several deltas, each arriving before the next was produced, the text
// exactly the sealed result's, the seal only after the result.
func TestAStreamedAnswerGrowsAtTheSiteBeforeTheResult(t *testing.T) {
	st := startStack(t, leaseMs)
	st.streams = true
	shop := st.newSite("shop-s")
	st.consent("alice", "shop-s")
	dev := st.pair("alice", "alice-s", daemon.EchoBackend{Drip: 250 * time.Millisecond})

	ctx, stop := context.WithCancel(st.ctx)
	defer stop()
	go func() { _ = dev.Run(ctx) }()
	results := newCollector()
	// The pump reports its first site as shop-a, whatever its id.
	startPumps(ctx, t, results, shop)

	prompt := "one two three four five six seven eight nine ten"
	stub := protocol.JobStub{ID: "live-1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		Streaming: true, DeadlineAt: time.Now().Add(2 * time.Minute).UnixMilli()}
	published := time.Now()
	if _, err := shop.Publish(ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
		t.Fatal(err)
	}
	want := "echo: " + prompt

	// Within the job's deadline, and far beyond a claim and a 2.5 s
	// stream on a loaded machine's DynamoDB Local.
	streamCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var got strings.Builder
	var arrivals []time.Time
	var last error
	for {
		for delta, err := range shop.Stream(streamCtx, "live-1") {
			if err != nil || delta == "" {
				last = err
				continue
			}
			got.WriteString(delta)
			arrivals = append(arrivals, time.Now())
		}
		// Absent until this site has sealed the job to the device.
		if last != site.ErrStreamAbsent || streamCtx.Err() != nil || got.Len() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("stream ended with %v after %q", last, got.String())
	}
	if got.String() != want {
		t.Fatalf("streamed %q, want %q", got.String(), want)
	}
	if len(arrivals) < 3 {
		t.Fatalf("the text arrived in %d pieces; a live stream grows in several", len(arrivals))
	}
	if spread := arrivals[len(arrivals)-1].Sub(arrivals[0]); spread < 500*time.Millisecond {
		t.Fatalf("all %d pieces arrived within %v: not live", len(arrivals), spread)
	}
	waitUntil(t, time.Minute, "the sealed result", func() bool { return results.count() == 1 }, func() string { return "" })
	r := results.all()["shop-a/live-1"][0]
	if r.Outcome.Text == nil || *r.Outcome.Text != want {
		t.Fatalf("result %+v, want the streamed text", r.Outcome)
	}
	if !results.at("shop-a/live-1").After(arrivals[0]) {
		t.Fatal("the result arrived before the first streamed text")
	}
	// The figures docs/performance.md reports: from publish to the first
	// streamed text, and to the sealed result at the site's pump (which
	// polls every 100 ms), for the same job.
	t.Logf("time to first text %v, to the sealed result %v; %d pieces over %v",
		arrivals[0].Sub(published).Round(time.Millisecond), results.at("shop-a/live-1").Sub(published).Round(time.Millisecond),
		len(arrivals), arrivals[len(arrivals)-1].Sub(arrivals[0]).Round(time.Millisecond))
}

// A device shut down in the middle of a stream, through byorelay on
// DynamoDB Local: its end frame `interrupted` reaches the site's reader,
// which ends with site.ErrStreamInterrupted within daemon.StreamEndBound of
// the Shutdown call, holding a prefix of the answer: not `stale` after a
// liveness read or the sweep, nor a wait for a result that will not come.
func TestADeviceShutDownMidStreamEndsItInterrupted(t *testing.T) {
	st := startStack(t, leaseMs)
	st.streams = true
	shop := st.newSite("shop-i")
	st.consent("alice", "shop-i")
	dev := st.pair("alice", "alice-i", daemon.EchoBackend{Drip: 100 * time.Millisecond})
	ctx, stop := context.WithCancel(st.ctx)
	defer stop()
	go func() { _ = dev.Run(ctx) }()
	startPumps(ctx, t, newCollector(), shop)

	prompt := strings.Repeat("word ", 200) + "end"
	stub := protocol.JobStub{ID: "live-i", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private",
		Streaming: true, DeadlineAt: time.Now().Add(2 * time.Minute).UnixMilli()}
	if _, err := shop.Publish(ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
		t.Fatal(err)
	}
	want := "echo: " + prompt
	streamCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var got strings.Builder
	var last error
	var shutdownAt, endedAt time.Time
	deltas := 0
	for {
		for delta, err := range shop.Stream(streamCtx, "live-i") {
			if err != nil || delta == "" {
				last = err
				endedAt = time.Now()
				continue
			}
			got.WriteString(delta)
			if deltas++; deltas == 3 {
				shutdownAt = time.Now()
				go func() {
					if err := dev.Shutdown(context.Background()); err != nil {
						t.Errorf("shutdown: %v", err)
					}
				}()
			}
		}
		if last != site.ErrStreamAbsent || streamCtx.Err() != nil || got.Len() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if shutdownAt.IsZero() {
		t.Fatalf("the stream ended with %v after %d deltas, before the shutdown", last, deltas)
	}
	if !errors.Is(last, site.ErrStreamInterrupted) {
		t.Fatalf("the stream ended with %v, want %v", last, site.ErrStreamInterrupted)
	}
	if took := endedAt.Sub(shutdownAt); took > daemon.StreamEndBound {
		t.Fatalf("the reader learned of the shutdown %v after it began, beyond the bound %v", took, daemon.StreamEndBound)
	}
	if !strings.HasPrefix(want, got.String()) || got.Len() == len(want) {
		t.Fatalf("streamed %q: want a proper prefix of the answer", got.String())
	}
	t.Logf("the reader ended interrupted %v after Shutdown began, holding %d of %d characters",
		endedAt.Sub(shutdownAt).Round(time.Millisecond), got.Len(), len(want))
}
