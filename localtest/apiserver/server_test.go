package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// recorder is a handler that keeps the event it was given and answers with
// a response the test chose.
type recorder struct {
	got  chan events.APIGatewayV2HTTPRequest
	resp events.APIGatewayV2HTTPResponse
	err  error
}

func newRecorder(resp events.APIGatewayV2HTTPResponse) *recorder {
	return &recorder{got: make(chan events.APIGatewayV2HTTPRequest, 1), resp: resp}
}

func (r *recorder) handle(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	r.got <- ev
	return r.resp, r.err
}

func mustRoute(t *testing.T, method, path, function string) Route {
	t.Helper()
	r, err := newRoute(method, path)
	if err != nil {
		t.Fatal(err)
	}
	r.Function = function
	r.Timeout = 5 * time.Second
	return r
}

func serve(t *testing.T, routes []Route, handlers map[string]Handler) *httptest.Server {
	t.Helper()
	s, err := New(Config{Routes: routes, Handlers: handlers, Now: func() time.Time { return time.UnixMilli(1_700_000_000_123) }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

func TestRequestBecomesTheEventAPIGatewayWouldSend(t *testing.T) {
	rec := newRecorder(events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "{}", Headers: map[string]string{"content-type": "application/json"}})
	ts := serve(t, []Route{mustRoute(t, "POST", "/relay/{proxy+}", "Site")}, map[string]Handler{"Site": rec.handle})

	body := `{"protocolVersion":"2","x":"é"}`
	req, _ := http.NewRequest("POST", ts.URL+"/relay/site/enqueue?siteId=a%20b&x=1&x=2", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Byollm-Site", "site-1")
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	req.Header.Add("Cookie", "a=1; b=2")
	req.Header.Set("User-Agent", "test-agent")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ev := <-rec.got

	checks := []struct{ name, got, want string }{
		{"version", ev.Version, "2.0"},
		{"routeKey", ev.RouteKey, "POST /relay/{proxy+}"},
		{"requestContext.routeKey", ev.RequestContext.RouteKey, "POST /relay/{proxy+}"},
		{"rawPath", ev.RawPath, "/relay/site/enqueue"},
		{"rawQueryString", ev.RawQueryString, "siteId=a%20b&x=1&x=2"},
		{"query siteId", ev.QueryStringParameters["siteId"], "a b"},
		{"query repeated", ev.QueryStringParameters["x"], "1,2"},
		{"path parameter", ev.PathParameters["proxy"], "site/enqueue"},
		{"header lower-cased", ev.Headers["x-byollm-site"], "site-1"},
		{"header repeated", ev.Headers["x-multi"], "one,two"},
		{"content-type", ev.Headers["content-type"], "application/json"},
		{"content-length", ev.Headers["content-length"], "32"},
		{"host", ev.Headers["host"], strings.TrimPrefix(ts.URL, "http://")},
		{"x-forwarded-proto", ev.Headers["x-forwarded-proto"], "http"},
		{"x-forwarded-for", ev.Headers["x-forwarded-for"], "127.0.0.1"},
		{"cookie header removed", ev.Headers["cookie"], ""},
		{"cookies", strings.Join(ev.Cookies, "|"), "a=1|b=2"},
		{"body", ev.Body, body},
		{"method", ev.RequestContext.HTTP.Method, "POST"},
		{"http.path", ev.RequestContext.HTTP.Path, "/relay/site/enqueue"},
		{"sourceIp", ev.RequestContext.HTTP.SourceIP, "127.0.0.1"},
		{"userAgent", ev.RequestContext.HTTP.UserAgent, "test-agent"},
		{"protocol", ev.RequestContext.HTTP.Protocol, "HTTP/1.1"},
		{"stage", ev.RequestContext.Stage, "$default"},
		{"time", ev.RequestContext.Time, "14/Nov/2023:22:13:20 +0000"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if ev.IsBase64Encoded {
		t.Error("a JSON body was base64-encoded")
	}
	if ev.RequestContext.TimeEpoch != 1_700_000_000_123 {
		t.Errorf("timeEpoch = %d", ev.RequestContext.TimeEpoch)
	}
	if ev.RequestContext.RequestID == "" || resp.Header.Get("Apigw-Requestid") != ev.RequestContext.RequestID {
		t.Errorf("request id %q, response header %q", ev.RequestContext.RequestID, resp.Header.Get("Apigw-Requestid"))
	}
}

func TestBinaryOrUntypedBodiesArriveBase64Encoded(t *testing.T) {
	cases := []struct {
		name, contentType string
		body              []byte
		wantBase64        bool
	}{
		{"JSON text", "application/json; charset=utf-8", []byte(`{"a":1}`), false},
		{"plain text", "text/plain", []byte("hello"), false},
		{"JSON that is not UTF-8", "application/json", []byte{'"', 0xff, '"'}, true},
		{"octet stream", "application/octet-stream", []byte("abc"), true},
		{"no content type", "", []byte(`{"a":1}`), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorder(events.APIGatewayV2HTTPResponse{StatusCode: 204})
			ts := serve(t, []Route{mustRoute(t, "POST", "/x", "F")}, map[string]Handler{"F": rec.handle})
			req, _ := http.NewRequest("POST", ts.URL+"/x", bytes.NewReader(c.body))
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ev := <-rec.got
			if ev.IsBase64Encoded != c.wantBase64 {
				t.Fatalf("isBase64Encoded = %v, want %v", ev.IsBase64Encoded, c.wantBase64)
			}
			got := []byte(ev.Body)
			if ev.IsBase64Encoded {
				if got, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, c.body) {
				t.Fatalf("body %q, want %q", got, c.body)
			}
		})
	}
}

func TestAGetWithoutBodyHasNoBodyAndNoQueryMap(t *testing.T) {
	rec := newRecorder(events.APIGatewayV2HTTPResponse{StatusCode: 200})
	ts := serve(t, []Route{mustRoute(t, "GET", "/x", "F")}, map[string]Handler{"F": rec.handle})
	resp, err := http.Get(ts.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ev := <-rec.got
	if ev.Body != "" || ev.IsBase64Encoded || ev.QueryStringParameters != nil || ev.Headers["content-length"] != "" {
		t.Fatalf("body %q base64 %v query %v content-length %q", ev.Body, ev.IsBase64Encoded, ev.QueryStringParameters, ev.Headers["content-length"])
	}
}

func TestFunctionResponseBecomesTheHTTPResponse(t *testing.T) {
	cases := []struct {
		name     string
		resp     events.APIGatewayV2HTTPResponse
		wantCode int
		wantBody string
		wantCT   string
	}{
		{"a JSON answer", events.APIGatewayV2HTTPResponse{StatusCode: 401, Headers: map[string]string{"content-type": "application/json"}, Body: `{"error":"unauthorized"}`}, 401, `{"error":"unauthorized"}`, "application/json"},
		{"a base64 body is decoded", events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"content-type": "text/html; charset=utf-8"}, Body: base64.StdEncoding.EncodeToString([]byte("<p>hi</p>")), IsBase64Encoded: true}, 200, "<p>hi</p>", "text/html; charset=utf-8"},
		{"no content type is invented", events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"a":1}`}, 200, `{"a":1}`, ""},
		{"a missing status code is API Gateway's 500", events.APIGatewayV2HTTPResponse{Body: "x"}, 500, `{"message":"Internal Server Error"}`, "application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := c.resp
			resp.Cookies = []string{"s=1; Path=/", "t=2"}
			rec := newRecorder(resp)
			ts := serve(t, []Route{mustRoute(t, "GET", "/x", "F")}, map[string]Handler{"F": rec.handle})
			code, body, h := get(t, ts.URL+"/x")
			if code != c.wantCode || body != c.wantBody || h.Get("Content-Type") != c.wantCT {
				t.Fatalf("got %d %q content-type %q; want %d %q %q", code, body, h.Get("Content-Type"), c.wantCode, c.wantBody, c.wantCT)
			}
			if code < 500 && strings.Join(h.Values("Set-Cookie"), "|") != "s=1; Path=/|t=2" {
				t.Fatalf("Set-Cookie %q", h.Values("Set-Cookie"))
			}
		})
	}
}

func TestGatewayAnswersWhenNoFunctionDoes(t *testing.T) {
	blocked := func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		<-ctx.Done()
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	}
	failing := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{}, errors.New("boom")
	}
	panicking := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		panic("boom")
	}
	huge := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: strings.Repeat("a", MaxResponsePayload)}, nil
	}
	slow := mustRoute(t, "GET", "/slow", "Blocked")
	slow.Timeout = 50 * time.Millisecond
	ts := serve(t, []Route{
		slow,
		mustRoute(t, "GET", "/error", "Failing"),
		mustRoute(t, "GET", "/panic", "Panicking"),
		mustRoute(t, "GET", "/huge", "Huge"),
	}, map[string]Handler{"Blocked": blocked, "Failing": failing, "Panicking": panicking, "Huge": huge})

	cases := []struct {
		path, wantBody string
		wantCode       int
	}{
		{"/slow", `{"message":"Internal Server Error"}`, 500},
		{"/error", `{"message":"Internal Server Error"}`, 500},
		{"/panic", `{"message":"Internal Server Error"}`, 500},
		{"/huge", `{"message":"Internal Server Error"}`, 500},
		{"/nowhere", `{"message":"Not Found"}`, 404},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.path, "/"), func(t *testing.T) {
			code, body, h := get(t, ts.URL+c.path)
			if code != c.wantCode || body != c.wantBody || h.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q %q, want %d %q", code, body, h.Get("Content-Type"), c.wantCode, c.wantBody)
			}
		})
	}
}

func TestHandlerContextHasTheDeadlineAndLambdaContext(t *testing.T) {
	var deadline time.Time
	var lc *lambdacontext.LambdaContext
	h := func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		deadline, _ = ctx.Deadline()
		lc, _ = lambdacontext.FromContext(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: 204}, nil
	}
	ts := serve(t, []Route{mustRoute(t, "GET", "/x", "Fn")}, map[string]Handler{"Fn": h})
	before := time.Now()
	if code, _, _ := get(t, ts.URL+"/x"); code != 204 {
		t.Fatalf("status %d", code)
	}
	if left := deadline.Sub(before); left <= 4*time.Second || left > 6*time.Second {
		t.Fatalf("deadline %v after the request, want the route's 5s", left)
	}
	if lc == nil || !strings.HasSuffix(lc.InvokedFunctionArn, ":function:Fn") || lc.AwsRequestID == "" {
		t.Fatalf("lambda context %+v", lc)
	}
}

func TestBodiesOverLambdasInvokeLimitAreRefusedWith413(t *testing.T) {
	rec := newRecorder(events.APIGatewayV2HTTPResponse{StatusCode: 200})
	ts := serve(t, []Route{mustRoute(t, "POST", "/x", "F")}, map[string]Handler{"F": rec.handle})

	post := func(n int) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+"/x", strings.NewReader(strings.Repeat("a", n)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The event adds its headers and context to the body, so a body a few
	// KB under the limit already fits and one at the limit does not.
	if code, _ := post(MaxInvokePayload - 4096); code != 200 {
		t.Fatalf("a body just under the limit: status %d", code)
	}
	<-rec.got
	for _, n := range []int{MaxInvokePayload - 100, MaxRequestBody + 1} {
		code, body := post(n)
		if code != 413 || body != `{"message":"Request Entity Too Large"}` {
			t.Fatalf("%d bytes: got %d %q", n, code, body)
		}
	}
	select {
	case <-rec.got:
		t.Fatal("an oversized request reached the function")
	default:
	}
}

func TestNewRefusesARouteWithoutAHandler(t *testing.T) {
	_, err := New(Config{Routes: []Route{mustRoute(t, "GET", "/x", "Missing")}, Handlers: map[string]Handler{}})
	if err == nil {
		t.Fatal("accepted")
	}
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}
