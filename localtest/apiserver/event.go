package apiserver

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Values API Gateway stamps that have no local meaning. Fixed, so a handler
// that logs them logs something recognisably local.
const (
	localAccountID = "000000000000"
	localAPIID     = "local"
	stage          = "$default"
)

// apigwTime is the layout of requestContext.time ("12/Mar/2020:19:03:58 +0000").
const apigwTime = "02/Jan/2006:15:04:05 -0700"

// newEvent translates an HTTP request into the payload format 2.0 event API
// Gateway would hand the route's function. body is the whole request body.
func newEvent(r *http.Request, m match, body []byte, requestID string, now time.Time) events.APIGatewayV2HTTPRequest {
	host := r.Host
	sourceIP := r.RemoteAddr
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		sourceIP = h
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              m.route.Key,
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies(r.Header),
		Headers:               headers(r, len(body), sourceIP, now),
		QueryStringParameters: queryParameters(r.URL.RawQuery),
		PathParameters:        m.params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     m.route.Key,
			AccountID:    localAccountID,
			Stage:        stage,
			RequestID:    requestID,
			APIID:        localAPIID,
			DomainName:   hostOnly(host),
			DomainPrefix: strings.SplitN(hostOnly(host), ".", 2)[0],
			Time:         now.UTC().Format(apigwTime),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.EscapedPath(),
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if textual(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// headers lower-cases names and joins repeated values with commas, as format
// 2.0 does (it has no multi-value map). Cookies travel separately. Go moves
// Host and Content-Length out of the header map; API Gateway passes both,
// and adds the forwarding headers a function behind it sees.
func headers(r *http.Request, bodyLen int, sourceIP string, now time.Time) map[string]string {
	out := map[string]string{}
	for name, values := range r.Header {
		lower := strings.ToLower(name)
		if lower == "cookie" {
			continue
		}
		out[lower] = strings.Join(values, ",")
	}
	out["host"] = r.Host
	if bodyLen > 0 {
		out["content-length"] = strconv.Itoa(bodyLen)
	}
	if out["x-amzn-trace-id"] == "" {
		out["x-amzn-trace-id"] = traceID(now)
	}
	if prior := out["x-forwarded-for"]; prior != "" {
		out["x-forwarded-for"] = prior + ", " + sourceIP
	} else {
		out["x-forwarded-for"] = sourceIP
	}
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		out["x-forwarded-port"] = port
	} else {
		out["x-forwarded-port"] = "80"
	}
	out["x-forwarded-proto"] = "http"
	if r.TLS != nil {
		out["x-forwarded-proto"] = "https"
	}
	return out
}

// cookies is the cookies field: every cookie of every Cookie header, split
// on ";" and trimmed; nil when there are none (the field is then absent).
func cookies(h http.Header) []string {
	var out []string
	for _, line := range h.Values("Cookie") {
		for _, c := range strings.Split(line, ";") {
			if c = strings.TrimSpace(c); c != "" {
				out = append(out, c)
			}
		}
	}
	return out
}

// queryParameters decodes the query string, joining repeated keys with
// commas; nil (absent) for an empty query, as API Gateway sends it.
func queryParameters(raw string) map[string]string {
	if raw == "" {
		return nil
	}
	values, err := url.ParseQuery(raw)
	if err != nil && len(values) == 0 {
		return nil
	}
	out := make(map[string]string, len(values))
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = strings.Join(values[k], ",")
	}
	return out
}

// textual reports whether a body of this content type reaches the function
// as text. Anything else (and a body that is not valid UTF-8) arrives
// base64-encoded with isBase64Encoded set, so a handler that forgets to
// decode fails here rather than first in AWS.
func textual(contentType string) bool {
	if contentType == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript":
		return true
	}
	return false
}

// newRequestID is a fresh id shaped like API Gateway's (base64 of 10 random
// bytes, e.g. "JKJaXmPLvHcESHA=").
func newRequestID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// traceID is an X-Ray style id for the x-amzn-trace-id header.
func traceID(now time.Time) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("Root=1-%08x-%s", now.Unix(), hex.EncodeToString(b[:]))
}

func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
