package container

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

func event(method, rawPath, query string, headers map[string]string, body string, b64 bool) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version:         "2.0",
		RawPath:         rawPath,
		RawQueryString:  query,
		Headers:         headers,
		Body:            body,
		IsBase64Encoded: b64,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: rawPath},
		},
	}
}

func TestFromAPIGatewayKeepsTheSignedBodyBytes(t *testing.T) {
	// Bytes that are not UTF-8 and JSON whose spacing a re-encode would
	// change: both must arrive exactly as sent.
	binary := []byte{0x7b, 0xff, 0x00, 0xfe, 0x7d}
	spaced := `{ "protocolVersion" : "2",  "max":1 }`
	tests := []struct {
		name string
		ev   events.APIGatewayV2HTTPRequest
		want []byte
	}{
		{"a text body arrives as its bytes", event("POST", "/byollm/claim", "", nil, spaced, false), []byte(spaced)},
		{"a base64 body arrives decoded", event("POST", "/byollm/claim", "", nil, base64.StdEncoding.EncodeToString(binary), true), binary},
		{"a base64 JSON body arrives decoded, spacing kept", event("POST", "/x", "", nil, base64.StdEncoding.EncodeToString([]byte(spaced)), true), []byte(spaced)},
		{"no body is an empty body", event("GET", "/relay/site/pending", "", nil, "", false), []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := FromAPIGateway(tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(req.Body, tt.want) {
				t.Fatalf("body = %q, want %q", req.Body, tt.want)
			}
		})
	}
}

func TestFromAPIGatewayRefusesAnUndecodableBase64Body(t *testing.T) {
	if _, err := FromAPIGateway(event("POST", "/byollm/claim", "", nil, "not base64!!", true)); err == nil {
		t.Fatal("want an error")
	}
}

func TestFromAPIGatewayKeepsPathQueryAndMethodAsSent(t *testing.T) {
	ev := event("GET", "/relay/site/%65nqueue", "siteId=a%20b&protocolVersion=2&siteId=c", nil, "", false)
	ev.RequestContext.HTTP.Path = "/relay/site/enqueue" // API Gateway's decoded form
	req, err := FromAPIGateway(ev)
	if err != nil {
		t.Fatal(err)
	}
	if req.Path != "/relay/site/%65nqueue" {
		t.Errorf("path = %q: the raw path must win, as the reference's url.pathname does", req.Path)
	}
	if req.RawQuery != "siteId=a%20b&protocolVersion=2&siteId=c" {
		t.Errorf("raw query = %q", req.RawQuery)
	}
	if req.Method != "GET" {
		t.Errorf("method = %q", req.Method)
	}
}

func TestFromAPIGatewayUsesTheContextPathWithoutRawPath(t *testing.T) {
	ev := event("POST", "", "", nil, "", false)
	ev.RequestContext.HTTP.Path = "/byollm/heartbeat"
	req, err := FromAPIGateway(ev)
	if err != nil {
		t.Fatal(err)
	}
	if req.Path != "/byollm/heartbeat" {
		t.Fatalf("path = %q", req.Path)
	}
}

func TestFromAPIGatewayHeadersReadThroughCanonicalKeys(t *testing.T) {
	ev := event("POST", "/byollm/claim", "", map[string]string{
		"x-byollm-runner":    "runner-1",
		"x-byollm-issued-at": "1795941000000",
		"content-type":       "application/json",
		"accept":             "a/b,c/d", // API Gateway's join of two accept headers
	}, "", false)
	ev.Cookies = []string{"a=1", "b=2"}
	req, err := FromAPIGateway(ev)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"X-Byollm-Runner": "runner-1", "x-byollm-issued-at": "1795941000000",
		"Content-Type": "application/json", "Accept": "a/b,c/d", "Cookie": "a=1; b=2",
	} {
		if got := req.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if n := len(req.Header.Values("Accept")); n != 1 {
		t.Errorf("accept has %d values, want the one API Gateway sent", n)
	}
}

func TestToAPIGatewaySendsTextAsTextAndBytesAsBase64(t *testing.T) {
	text := ToAPIGateway(Response{Status: 404, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"error":"not-found"}`)})
	if text.StatusCode != 404 || text.IsBase64Encoded || text.Body != `{"error":"not-found"}` {
		t.Errorf("json answer = %+v", text)
	}
	if text.Headers["content-type"] != "application/json" {
		t.Errorf("headers = %v, want lower-case content-type", text.Headers)
	}
	raw := []byte{0xff, 0xfe, 0x00}
	bin := ToAPIGateway(Response{Status: 200, Body: raw})
	if !bin.IsBase64Encoded || bin.Body != base64.StdEncoding.EncodeToString(raw) {
		t.Errorf("binary answer = %+v", bin)
	}
	if bin.Headers != nil {
		t.Errorf("headers = %v, want none", bin.Headers)
	}
}

func TestToAPIGatewayMovesSetCookieToCookies(t *testing.T) {
	resp := ToAPIGateway(Response{Status: 200, Header: http.Header{
		"Set-Cookie": {"a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT", "b=2"},
		"Vary":       {"Origin", "Accept"},
	}})
	if len(resp.Cookies) != 2 || resp.Cookies[0] != "a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT" {
		t.Errorf("cookies = %q", resp.Cookies)
	}
	if _, ok := resp.Headers["set-cookie"]; ok {
		t.Error("set-cookie left in headers, where its comma would split it")
	}
	if resp.Headers["vary"] != "Origin, Accept" {
		t.Errorf("vary = %q", resp.Headers["vary"])
	}
}
