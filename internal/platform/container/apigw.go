package container

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Request is an HTTP request as a function's handler sees it, in the
// fields of the relay's and the site server's own request types, so each
// stack converts it without this package importing either.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// SourceIP is API Gateway's requestContext.http.sourceIp: the address
	// the front end saw, never a header a client could set.
	SourceIP string
}

// Response is what a handler answers: the status, the headers and the
// body bytes.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// FromAPIGateway turns an HTTP API v2 event into a request with the
// body bytes exactly as the client sent them: request signatures cover the
// SHA-256 of those bytes, so a body that was re-encoded on the way in (a
// base64 body left encoded, a JSON body re-marshalled) fails every
// signature.
func FromAPIGateway(ev events.APIGatewayV2HTTPRequest) (Request, error) {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return Request{}, fmt.Errorf("container: base64 body: %w", err)
		}
		body = b
	}
	// rawPath is the path as the client wrote it, percent-escapes kept, as
	// the reference's url.pathname is. The relay's exact-path matches would
	// otherwise accept /relay/site/%65nqueue, which the reference 404s.
	// (With a named stage rawPath would carry the stage prefix: the
	// template uses the $default stage so it never does.)
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	header := make(http.Header, len(ev.Headers)+1)
	for k, v := range ev.Headers {
		// API Gateway lower-cases names and joins repeated headers with
		// commas; one canonical key with the joined value is what a Go
		// server would have seen for a single header line.
		header[textproto.CanonicalMIMEHeaderKey(k)] = []string{v}
	}
	if len(ev.Cookies) > 0 {
		// HTTP API moves Cookie headers into their own field; put them back
		// so the request reads as it was sent. Nothing in the relay reads
		// them.
		header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	return Request{
		Method:   ev.RequestContext.HTTP.Method,
		Path:     path,
		RawQuery: ev.RawQueryString,
		Header:   header,
		Body:     body,
		SourceIP: ev.RequestContext.HTTP.SourceIP,
	}, nil
}

// ToAPIGateway turns a response into an HTTP API v2 response. A body
// that is not UTF-8 goes base64 with IsBase64Encoded set; JSON and HTML
// go as text, so an invoke's output is readable.
func ToAPIGateway(r Response) events.APIGatewayV2HTTPResponse {
	out := events.APIGatewayV2HTTPResponse{StatusCode: r.Status}
	if len(r.Header) > 0 {
		out.Headers = make(map[string]string, len(r.Header))
	}
	for k, vs := range r.Header {
		if len(vs) == 0 {
			continue
		}
		if strings.EqualFold(k, "Set-Cookie") {
			// Cookies cannot be comma-joined (Expires holds a comma): the
			// v2 format carries them in their own list.
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		// Lower case, as the reference's Node server writes them.
		out.Headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	if len(out.Headers) == 0 {
		out.Headers = nil
	}
	if utf8.Valid(r.Body) {
		out.Body = string(r.Body)
	} else {
		out.Body = base64.StdEncoding.EncodeToString(r.Body)
		out.IsBase64Encoded = true
	}
	return out
}
