package relay_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// fuzzPaths are the paths a fuzzed request goes to: every endpoint of both
// planes, the debug page and one nobody serves.
var fuzzPaths = []string{
	"/byollm/pair", "/byollm/claim", "/byollm/fetch", "/byollm/result", "/byollm/heartbeat", "/byollm/release",
	"/relay/site/enqueue", "/relay/site/payload", "/relay/site/cancel", "/relay/site/pending", "/relay/site/results",
	"/debug", "/byollm/elsewhere", seal.StreamAppendPath, seal.StreamAttachPath,
}

// FuzzHandle drives the whole relay over the memory store with requests of
// random shape: any path (the stream lane's included), any caller header of any length and bytes, any
// body, signed by the real daemon or site (so the body reaches the
// handlers behind authentication), signed by a real key under a made-up
// caller id, or not signed at all. Whatever arrives, the answer is never a
// 5xx: a 5xx is the relay's own failure, it drives the error alarm, and a
// caller must not be able to cause one.
//
// make fuzz runs it for longer; make test runs the seeds and a few
// seconds.
func FuzzHandle(f *testing.F) {
	clk := clock.NewManual(start)
	site := relaytest.NewSite(f, "site-a")
	daemon := relaytest.NewDaemon(f, "runner-1", "alice")
	proj := relay.NewStaticProjection(relaytest.NewFixture().Site(site).Device(daemon).Consent("alice", "site-a").Projection())
	deadline := start.UnixMilli() + 3_600_000
	// A fresh store for every input, holding one queued job, so a failure
	// reproduces from its input alone and a million inputs do not make
	// the store (and every later input) slower.
	fresh := func(t *testing.T) *relay.Relay {
		mem := memory.New(store.Options{Clock: clk})
		if _, err := mem.Enqueue(context.Background(), store.EnqueueInput{ID: "job-1", SiteID: "site-a", Stub: site.Stub("job-1", "alice", deadline)}); err != nil {
			t.Fatal(err)
		}
		r, err := relay.New(relay.Config{
			Store: mem, Pairing: mem, VerificationURL: "https://control.example/pair",
			Projection: proj, Clock: clk, Debug: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	seed := func(path int, mode uint8, caller, query string, body any) {
		f.Add(uint8(path), mode, caller, query, relaytest.Body(f, body))
	}
	stub := site.Stub("job-1", "alice", deadline)
	seed(0, 0, "", "", startBody(daemon))
	seed(0, 0, "", "", pollBody("code"))
	seed(0, 0, "", "", protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: daemon.Public()})
	seed(1, 1, "", "", claimBody(daemon, 2))
	seed(2, 1, "", "", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: "runner-1", JobID: "job-1", LeaseID: "l"})
	seed(3, 1, "", "", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: "runner-1", JobID: "job-1", LeaseID: "l",
		Envelope: daemon.SealResult(f, "job-1", "x", site.Public(), deadline), Disposition: "ok"})
	seed(4, 1, "", "", heartbeatBody(daemon, protocol.GrantRef{JobID: "job-1", LeaseID: "l"}))
	seed(5, 1, "", "", protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: "runner-1", Leases: []protocol.GrantRef{{JobID: "job-1", LeaseID: "l"}}, Reason: "refused"})
	seed(6, 1, "", "", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub})
	seed(7, 1, "", "", protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1",
		Envelope: site.Seal(f, "job-1", "x", daemon.Public(), deadline)})
	seed(8, 1, "", "", protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1"})
	seed(9, 1, "", "siteId=site-a&protocolVersion=2", nil)
	seed(10, 1, "", "siteId=site-a&protocolVersion=2", nil)
	seed(11, 0, "", "siteId=site-a", nil)
	seed(1, 2, strings.Repeat("r", 3000), "", claimBody(daemon, 1))
	seed(6, 2, strings.Repeat("s", 3000), "", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub})
	seed(4, 0, "\xff\xfe", "", "\xef\xbb\xbf{}")
	// Bodies that are not one JSON object, signed over the bytes sent.
	seed(1, 1, "", "protocolVersion=2", string(relaytest.Body(f, claimBody(daemon, 1)))+" x")
	seed(6, 1, "", "", `[{"protocolVersion":"2"}]`)
	seed(8, 1, "", "protocolVersion=2", `null`)
	seed(4, 1, "", "", "{\"protocolVersion\":\"2\",\"runnerId\":\"runner-1\xff\"}")

	f.Fuzz(func(t *testing.T, path uint8, mode uint8, caller, query string, body []byte) {
		p := fuzzPaths[int(path)%len(fuzzPaths)]
		req := relay.Request{Method: http.MethodPost, Path: p, RawQuery: query, Header: http.Header{}, Body: body}
		if mode&4 != 0 {
			req.Method = http.MethodGet
		}
		endpoint := p[strings.LastIndex(p, "/")+1:]
		now := clk.Now().UnixMilli()
		signed := req.Body
		if req.Method != http.MethodPost {
			signed = nil
		}
		onSite := strings.HasPrefix(p, "/relay/") || p == seal.StreamAttachPath
		if mode&8 != 0 {
			req.Header.Set(seal.StreamsHeader, seal.StreamsVersion1)
		}
		switch mode & 3 {
		case 0: // unsigned, or signed with made-up values
			req.Header[http.CanonicalHeaderKey(protocol.HeaderRunner)] = []string{caller}
			req.Header[http.CanonicalHeaderKey(protocol.HeaderSite)] = []string{caller}
			req.Header.Set(protocol.HeaderIssuedAt, strconv.FormatInt(now, 10))
			req.Header.Set(protocol.HeaderSignature, caller)
		case 1: // signed by who the relay knows
			if onSite {
				protocol.SignSiteRequest(site.Keys, endpoint, site.SiteID, now, signed).SetHeaders(req.Header, protocol.HeaderSite)
			} else {
				protocol.SignRequest(daemon.Keys, endpoint, daemon.RunnerID, now, signed).SetHeaders(req.Header, protocol.HeaderRunner)
			}
		default: // a real key under a made-up caller id
			if onSite {
				protocol.SignSiteRequest(site.Keys, endpoint, caller, now, signed).SetHeaders(req.Header, protocol.HeaderSite)
			} else {
				protocol.SignRequest(daemon.Keys, endpoint, caller, now, signed).SetHeaders(req.Header, protocol.HeaderRunner)
			}
		}
		resp := fresh(t).Handle(context.Background(), req)
		if resp.Status >= 500 {
			t.Fatalf("%s %s (mode %d, caller %d bytes, body %d bytes): %d %s",
				req.Method, p, mode, len(caller), len(body), resp.Status, resp.Body)
		}
	})
}

// Bodies near the size ceiling and bodies nested far deeper than any wire
// shape are refused as bad requests, not by running out of stack or time.
func TestHugeAndDeeplyNestedBodiesAreBadRequests(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		deep := func(n int) []byte {
			return append(bytes.Repeat([]byte(`{"a":[`), n), bytes.Repeat([]byte(`]}`), n)...)
		}
		nearSix := func() []byte {
			// A syntactically valid heartbeat whose one string is 6 MiB.
			body := heartbeatBody(w.daemon)
			body.DaemonVersion = strings.Repeat("v", 6<<20)
			return relaytest.Body(t, body)
		}
		cases := []struct {
			name string
			req  relay.Request
			want int
		}{
			{"a million levels of nesting, unsigned, to pair", get("POST", "/byollm/pair", "", deep(1_000_000)), 400},
			{"a million levels of nesting, signed, to heartbeat", w.daemon.Request(t, "heartbeat", w.now(), deep(1_000_000)), 400},
			{"a million levels inside a valid field, signed, to enqueue", w.site.Request(t, "enqueue", w.now(),
				[]byte(`{"protocolVersion":"2","siteId":"site-a","stub":`+string(deep(1_000_000))+`}`)), 400},
			{"a 6 MiB string in a signed heartbeat", w.daemon.Request(t, "heartbeat", w.now(), nearSix()), 200},
			{"6 MiB of white space, unsigned, to pair", get("POST", "/byollm/pair", "", bytes.Repeat([]byte(" "), 6<<20)), 400},
			{"a body over the ceiling", get("POST", "/byollm/pair", "", bytes.Repeat([]byte(" "), relay.MaxBodyBytes+1)), 400},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				resp := w.do(tc.req)
				if resp.Status != tc.want {
					t.Fatalf("got %d %.200s, want %d", resp.Status, resp.Body, tc.want)
				}
			})
		}
	})
}

// What a caller chooses the length of is clipped in the logs: a request
// whose headers, path and fields run to megabytes leaves lines of a few
// hundred bytes.
func TestCallerChosenStringsAreClippedInTheLogs(t *testing.T) {
	w := newWorld(t, factories[0], func(c *relay.Config) { c.DaemonFloor = "0.2.0" })
	huge := strings.Repeat("z", 1<<20)
	body := heartbeatBody(w.daemon)
	body.DaemonVersion = "0.0.1-" + huge
	req := w.daemon.Request(t, "heartbeat", w.now(), body)
	req.Header.Set("X-Request-Id", huge)
	req.Path = "/byollm/" + huge + "/heartbeat"
	w.do(req)
	enqueue := w.site.Request(t, "enqueue", w.now(), protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: huge, Stub: w.site.Stub("j", "alice", w.deadline())})
	w.do(enqueue)
	for _, line := range strings.Split(w.logs.String(), "\n") {
		if len(line) > 4096 {
			t.Fatalf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
	if !strings.Contains(w.logs.String(), "refuse-below-floor") || !strings.Contains(w.logs.String(), "refuse-cross-site") {
		t.Fatalf("the refusals were not logged:\n%.2000s", w.logs.String())
	}
}
