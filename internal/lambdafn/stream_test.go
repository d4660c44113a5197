package lambdafn

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
)

// urlEventOf is the function URL event for a signed test request, shaped as
// Lambda shapes it for a function URL: lower-case header names, the body as
// text.
func urlEventOf(r relay.Request, accept string) *events.LambdaFunctionURLRequest {
	ev := &events.LambdaFunctionURLRequest{
		Version:        "2.0",
		RawPath:        r.Path,
		RawQueryString: r.RawQuery,
		Headers:        map[string]string{"host": "abc.lambda-url.eu-west-1.on.aws", "accept": accept},
		RequestContext: events.LambdaFunctionURLRequestContext{
			DomainName: "abc.lambda-url.eu-west-1.on.aws",
			HTTP:       events.LambdaFunctionURLRequestContextHTTPDescription{Method: http.MethodPost, Path: r.Path, SourceIP: "203.0.113.7"},
		},
		Body: string(r.Body),
	}
	for k, vs := range r.Header {
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	return ev
}

// The attach function as Lambda runs it, in process: lambdaurl.Wrap around
// the Stack's AttachHandler, on DynamoDB Local. The streaming response it
// returns carries the SSE headers, and its body delivers each frame the
// append function (through its own API Gateway handler) writes while the
// response is still open: one frame read before the next is appended.
func TestAttachStreamsFramesThroughLambdaurlAsAppended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ddb := localtest.DynamoEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", ddb)
	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := "stream-fn-" + time.Now().Format("150405.000000")
	if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
		t.Fatal(err)
	}
	env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": table}))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now().UTC())
	aws := localtest.AWSConfig(ddb)
	st, err := Open(env, Options{AWS: &aws, Clock: clk, MetricsOut: discard{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, req relay.Request) string {
		t.Helper()
		h, err := st.Handler(name)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h(ctx, eventOf(t, req))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", name, resp.StatusCode, resp.Body, err)
		}
		return resp.Body
	}
	if _, err := st.Handler(StreamAttach); err == nil {
		t.Fatal("the attach function has an API Gateway handler")
	}

	site := &relaytest.Site{Keys: world.Site, SiteID: demo.SiteID}
	daemon := &relaytest.Daemon{Keys: world.Daemon, RunnerID: demo.RunnerID, Owner: demo.Owner}
	deadline := clk.Now().Add(time.Hour).UnixMilli()
	stub := protocol.JobStub{ID: "live-1", Kind: "llm.generate", Owner: demo.Owner, Site: site.KeyID(),
		Audience: "private", SizeClass: "unbounded", Streaming: true, DeadlineAt: deadline}
	call(Enqueue, site.Request(t, "enqueue", clk.Now(), protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: demo.SiteID, Stub: stub}))
	caps := []protocol.Capability{{Kind: "llm.generate", Service: "local", BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: "private"}}
	claimReq := daemon.Request(t, "claim", clk.Now(), protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: demo.RunnerID, Capabilities: caps, Max: 1})
	claimReq.Header.Set(seal.StreamsHeader, seal.StreamsVersion1)
	var claimed protocol.ClaimResponse
	if err := json.Unmarshal([]byte(call(Claim, claimReq)), &claimed); err != nil || len(claimed.Jobs) != 1 {
		t.Fatalf("claimed %+v, %v", claimed, err)
	}
	lease := claimed.Jobs[0].Lease.ID
	call(Payload, site.Request(t, "payload", clk.Now(), protocol.PayloadRequest{ProtocolVersion: "2", SiteID: demo.SiteID, JobID: "live-1",
		Envelope: site.Seal(t, "live-1", "prompt", daemon.Public(), deadline)}))
	call(Fetch, daemon.Request(t, "fetch", clk.Now(), protocol.FetchRequest{ProtocolVersion: "2", RunnerID: demo.RunnerID, JobID: "live-1", LeaseID: lease}))

	sctx := seal.Context{JobID: "live-1", LeaseID: lease, DeviceKeyID: daemon.Keys.KeyID(), SiteKeyID: site.KeyID()}
	dk, err := seal.DeviceKey(daemon.Keys, site.Public(), sctx)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := seal.SiteKey(site.Keys, daemon.Public(), sctx)
	if err != nil {
		t.Fatal(err)
	}
	sealer := seal.NewSealer(dk)
	push := func(text string) {
		t.Helper()
		f, err := sealer.Chunk(text)
		if err != nil {
			t.Fatal(err)
		}
		req := daemon.Request(t, "append", clk.Now(), seal.AppendFrameRequest{ProtocolVersion: "2", JobID: "live-1", LeaseID: lease, Frame: f})
		req.Path = seal.StreamAppendPath
		call(StreamAppend, req)
	}

	attach := site.Request(t, "attach", clk.Now(), seal.AttachRequest{ProtocolVersion: "2", SiteID: demo.SiteID, JobID: "live-1"})
	attach.Path = seal.StreamAttachPath
	resp, err := lambdaurl.Wrap(st.AttachHandler())(ctx, urlEventOf(attach, "text/event-stream"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Headers["Content-Type"] != "text/event-stream; charset=utf-8" || resp.Headers["X-Accel-Buffering"] != "no" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Headers)
	}
	reader := seal.NewReader(sk, "live-1", 0, "", nil)
	lines := bufio.NewScanner(resp.Body)
	nextSealed := func() {
		t.Helper()
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				reader.Feed([]byte(data))
				if strings.Contains(data, `"sealed"`) {
					return
				}
			}
		}
		t.Fatalf("the response ended before a frame: %v", lines.Err())
	}
	for i, word := range []string{"one ", "two ", "three"} {
		push(word)
		nextSealed()
		if want := strings.Join([]string{"one ", "two ", "three"}[:i+1], ""); reader.Text() != want {
			t.Fatalf("after frame %d the site reads %q, want %q", i, reader.Text(), want)
		}
	}
	// The reader leaving ends the handler's writes (the pipe closes).
	if c, ok := resp.Body.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// discard is an io.Writer that drops everything (metrics off).
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
