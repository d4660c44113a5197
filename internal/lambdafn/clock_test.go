package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/store/dynamo"
)

// openOnFreshTable opens a Stack as a container does, from the environment,
// with DynamoDB at endpoint and a fresh table, metrics to metrics.
func openOnFreshTable(t *testing.T, endpoint string, metrics io.Writer) *Stack {
	t.Helper()
	localtest.LambdaEnv(t, map[string]string{"dynamodb": endpoint})
	table := localtest.UniqueName("clock")
	if err := dynamo.CreateTable(context.Background(), localtest.DynamoClient(t), table); err != nil {
		t.Fatal(err)
	}
	env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": table}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(env, Options{Logger: slog.New(slog.DiscardHandler), MetricsOut: metrics})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The deployed wiring of the store clock: with no injected clock, Open
// gives the store a ddb.ServerClock, Calibrate calibrates it against DynamoDB
// (here DynamoDB Local, whose Date is this machine's clock), the sweeper
// sweeps with it, and a request publishes its offset as EMF.
func TestOpenBindsTheClockToDynamoDBAndPublishesOffset(t *testing.T) {
	ctx := context.Background()
	var metrics bytes.Buffer
	st := openOnFreshTable(t, localtest.DynamoEndpoint(t), &metrics)
	if st.serverClock == nil {
		t.Fatal("Open gave the store no ServerClock")
	}
	st.Calibrate(ctx)
	// One response settles the clock only when its round trip is under a
	// second; on a loaded machine DynamoDB Local can take longer, and each
	// further response narrows the interval, as every call does deployed.
	for i := 0; i < 20 && st.serverClock.Reading().Uncertainty > ddb.MaxClockUncertainty; i++ {
		if err := st.Store.CalibrateClock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := st.serverClock.Reading(); !r.Calibrated || r.Uncertainty > ddb.MaxClockUncertainty {
		t.Fatalf("after Calibrate the store clock is %+v, want calibrated within %v", r, ddb.MaxClockUncertainty)
	}
	if _, err := st.SweepHandler()(ctx, json.RawMessage(`{"trigger":"schedule"}`)); err != nil {
		t.Fatalf("sweep with a calibrated clock: %v", err)
	}
	handler, err := st.Handler(CatchAll)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/readyz"}
	ev.RequestContext.HTTP.Method = http.MethodGet
	ev.RequestContext.HTTP.Path = "/readyz"
	if _, err := handler(ctx, ev); err != nil {
		t.Fatal(err)
	}

	published := 0
	for _, r := range readEMF(t, &metrics) {
		offset, ok := r.Values[MetricClockOffset].(float64)
		if !ok {
			continue
		}
		checkEMF(t, r)
		published++
		// DynamoDB Local dates its answers from this very clock.
		if u := r.Values[MetricClockUncertainty].(float64); offset < -1000 || offset > 1000 || u > 1000 {
			t.Errorf("clock record = %v: want an offset within the uncertainty of 0", r.Values)
		}
	}
	if published != 1 {
		t.Fatalf("%d clock records after a sweep and a request, want 1 (at most one a minute)", published)
	}
}

// The cold start does not wait on DynamoDB, and no request is served
// before the store clock has read DynamoDB's: Open returns with the clock
// uncalibrated, the first request makes the calibrating read (a proxy
// holds its answer), and waits for that answer before the relay sees it.
func TestOnlyTheFirstRequestWaitsForTheClockNotOpen(t *testing.T) {
	ctx := context.Background()
	target, err := url.Parse(localtest.DynamoEndpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var held atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Header.Get("X-Amz-Target") == "DynamoDB_20120810.GetItem" && held.Add(1) == 1 {
			<-release // the first GetItem is the first request's calibrating read
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	st := openOnFreshTable(t, srv.URL, io.Discard)
	if st.serverClock.Reading().Calibrated {
		t.Fatal("the store clock is calibrated before DynamoDB answered")
	}
	handler, err := st.Handler(Claim)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/byollm/claim"}
		ev.RequestContext.HTTP.Method = http.MethodPost
		ev.RequestContext.HTTP.Path = "/byollm/claim"
		_, _ = handler(ctx, ev)
	}()
	select {
	case <-answered:
		t.Fatal("a request was served before the store clock read DynamoDB's")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never finished after DynamoDB answered")
	}
	if !st.serverClock.Reading().Calibrated {
		t.Fatal("the first request was served and the store clock is still the host's")
	}
}

// Every entry point reads DynamoDB's clock before it serves, the stream
// attach function's (a function URL, not an API Gateway handler) too:
// nothing at Open reads it.
func TestAttachCalibratesTheStoreClockBeforeItServes(t *testing.T) {
	st := openOnFreshTable(t, localtest.DynamoEndpoint(t), io.Discard)
	if st.serverClock.Reading().Calibrated {
		t.Fatal("the store clock is calibrated before anything was served")
	}
	// An unsigned attach: refused, and still after the clock was read.
	st.AttachHandler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/relay/site/stream", nil))
	if !st.serverClock.Reading().Calibrated {
		t.Fatal("the attach function served with its host's clock")
	}
}
