package lambdafn

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/relay"
)

// maxLocalBody bounds a body HTTPHandler reads. API Gateway refuses bodies
// over 10 MB and Lambda events over 6 MB; the protocol's largest envelope is
// 6 MiB of ciphertext inside a JSON body, so 16 MiB leaves every legal
// request through and stops a runaway one.
const maxLocalBody = 16 << 20

// HTTPHandler serves a function over net/http, translating each request
// into the API Gateway event the deployed function would receive and back:
// the local server runs the functions through the very translation they
// run behind API Gateway, base64 bodies included.
func HTTPHandler(h Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := ToEvent(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		resp, err := h(r.Context(), ev)
		if err != nil {
			// What API Gateway answers for a failed invocation.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
			return
		}
		body := []byte(resp.Body)
		if resp.IsBase64Encoded {
			if body, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		for k, v := range resp.Headers {
			w.Header().Set(k, v)
		}
		for _, c := range resp.Cookies {
			w.Header().Add("Set-Cookie", c)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	})
}

// ToEvent is the API Gateway HTTP API v2 event for r, shaped as API Gateway
// shapes it: lower-case header names, repeated headers comma-joined, cookies
// in their own list, and the body base64-encoded unless it is UTF-8 text
// of a textual content type.
func ToEvent(r *http.Request) (events.APIGatewayV2HTTPRequest, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxLocalBody+1))
		if err != nil {
			return events.APIGatewayV2HTTPRequest{}, fmt.Errorf("read body: %w", err)
		}
		if len(b) > maxLocalBody {
			return events.APIGatewayV2HTTPRequest{}, fmt.Errorf("body over %d bytes", maxLocalBody)
		}
		body = b
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "$default",
		RawPath:        r.URL.EscapedPath(),
		RawQueryString: r.URL.RawQuery,
		Headers:        map[string]string{},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  hostOnly(r.RemoteAddr),
				UserAgent: r.UserAgent(),
			},
		},
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			for _, v := range vs {
				for _, c := range strings.Split(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						ev.Cookies = append(ev.Cookies, c)
					}
				}
			}
			continue
		}
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	if r.Host != "" {
		ev.Headers["host"] = r.Host
	}
	if len(body) > 0 {
		if utf8.Valid(body) && textual(r.Header.Get("Content-Type")) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev, nil
}

// textual is whether API Gateway would pass a body of this content type as
// text. It passes more than this as text in practice; base64 is always
// correct, so erring toward it only exercises the decoding path.
func textual(contentType string) bool {
	ct := strings.ToLower(contentType)
	return strings.HasPrefix(ct, "text/") || strings.Contains(ct, "json")
}

func hostOnly(addr string) string {
	if i := strings.LastIndex(addr, ":"); i > 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}

// adminHandler serves the control API's net/http handler behind an API
// Gateway route authorised by IAM.
func (st *Stack) adminHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	req, err := FromAPIGateway(ev)
	if err != nil {
		return badEvent(), nil
	}
	return ToAPIGateway(serveHTTP(ctx, st.Admin, req)), nil
}

// serveHTTP runs an http.Handler on a relay.Request, for handlers written
// against net/http.
func serveHTTP(ctx context.Context, h http.Handler, req relay.Request) relay.Response {
	u := &url.URL{RawQuery: req.RawQuery}
	if p, err := url.PathUnescape(req.Path); err == nil {
		u.Path, u.RawPath = p, req.Path
	} else {
		u.Path = req.Path
	}
	r, err := http.NewRequestWithContext(ctx, req.Method, "/", bytes.NewReader(req.Body))
	if err != nil {
		return relay.Response{Status: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"error":"bad-request"}`)}
	}
	r.URL = u
	r.RequestURI = u.RequestURI()
	r.Header = req.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.ContentLength = int64(len(req.Body))
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return relay.Response{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
}

// recorder is the smallest http.ResponseWriter that keeps what it is told.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
