package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// MaxBodyBytes bounds a request body. The largest honest body is a result
// or payload carrying an envelope at protocol.MaxEnvelopeBytes plus a few
// hundred bytes of ids; a megabyte of headroom refuses nothing a conforming
// client sends and stops a body from costing a parse before it is refused.
// An HTTP front end should stop reading at this size too (Lambda's own
// synchronous payload limit, 6 MB, is lower still).
const MaxBodyBytes = protocol.MaxEnvelopeBytes + 1<<20

// reply is a plane's answer before encoding.
type reply struct {
	status int
	// code is the wire error code of a refusal, "" on success; it is what
	// logs and metrics name.
	code string
	// body is encoded with protocol.Encode unless html is set.
	body any
	html string
	// awaitingUntil becomes Response.AwaitingUntil.
	awaitingUntil int64
}

func ok(body any) reply { return reply{status: http.StatusOK, body: body} }

// fail is a refusal with the ordinary {error, message} body.
func fail(status int, code, message string) reply {
	return reply{status: status, code: code, body: protocol.NewWireError(code, message)}
}

// bare is the reference's {error} body with no message: unknown paths and
// the debug page's refusals.
func bare(status int, code string) reply {
	return reply{status: status, code: code, body: protocol.BareError{Error: code}}
}

// serverError answers a request the relay could not finish: a store or a
// callback failed. The reference lets the exception escape; a port answers
// 500, and says nothing about which dependency it was.
var serverError = fail(http.StatusInternalServerError, protocol.CodeServerError,
	"the relay could not answer this request; try again shortly")

// contended answers a request whose store operation lost to other replicas
// too often: nothing changed and a retry can succeed, so it is a 503 the
// client retries (clients retry 5xx), not a 500 that reads as a bug. The
// words name what was contended: a pairing is not a job, and a daemon's
// own heartbeat or claim is not "this job" either.
func contended(endpoint string) reply {
	what := "the relay is busy right now"
	switch endpoint {
	case "pair":
		what = "the relay is busy with other pairings"
	case "enqueue", "payload", "cancel", "fetch", "result":
		what = "the relay is busy with this job"
	}
	return fail(http.StatusServiceUnavailable, protocol.CodeServerError, what+"; try again shortly")
}

// call is one request in flight: what the logs name it by. Handlers fill
// in site, runner and job as they learn them.
type call struct {
	ctx       context.Context
	requestID string
	method    string
	path      string
	endpoint  string
	site      string
	runner    string
	job       string
	// caller is the address the request came from, as callerAddress
	// decided once the origin lock admitted it: what the pairing throttle
	// counts by. "" when the front end does not say.
	caller string
	// sourceIP is the front end's source address (Request.SourceIP),
	// logged beside caller where the two can differ.
	sourceIP string
}

func (c *call) attrs(extra []slog.Attr) []slog.Attr {
	attrs := []slog.Attr{slog.String("requestId", c.requestID), slog.String("endpoint", c.endpoint)}
	if c.site != "" {
		attrs = append(attrs, slog.String("site", c.site))
	}
	if c.runner != "" {
		attrs = append(attrs, slog.String("runner", c.runner))
	}
	if c.job != "" {
		attrs = append(attrs, slog.String("job", c.job))
	}
	return append(attrs, extra...)
}

// decide logs one decision of this request. The record's attributes are
// built only when the logger takes the record: a relay logging nowhere
// (the memory store's default, a test) or above info pays one Enabled
// call per decision, not the slices.
func (r *Relay) decide(c *call, decision string, extra ...slog.Attr) {
	if !r.log.Enabled(c.ctx, slog.LevelInfo) {
		return
	}
	extra = append([]slog.Attr{slog.String("decision", decision)}, extra...)
	r.log.LogAttrs(c.ctx, slog.LevelInfo, "decision", c.attrs(extra)...)
}

// Handle answers one request. It never returns an error: every failure is
// an HTTP answer, a store failure included (500 server-error).
func (r *Relay) Handle(ctx context.Context, req Request) Response {
	header := protocol.CanonicalHeader(req.Header)
	c := &call{
		ctx:       ctx,
		requestID: requestID(ctx, header),
		method:    req.Method,
		path:      req.Path,
		endpoint:  req.Path[strings.LastIndex(req.Path, "/")+1:],
		sourceIP:  req.SourceIP,
	}
	rep, admitted, err := r.checkOrigin(c, header)
	if admitted {
		// Only now: whether the viewer's address may be believed depends
		// on the request having passed the lock.
		c.caller = r.callerAddress(req.SourceIP, header)
		rep, err = r.dispatch(c, req, header)
	}
	switch {
	case errors.Is(err, store.ErrContention):
		r.log.LogAttrs(ctx, slog.LevelWarn, "store contention", c.attrs([]slog.Attr{slog.String("error", err.Error())})...)
		r.metrics.Conflict(c.endpoint)
		rep = contended(c.endpoint)
	case err != nil:
		r.log.LogAttrs(ctx, slog.LevelError, "request failed", c.attrs([]slog.Attr{slog.String("error", err.Error())})...)
		rep = serverError
	}
	resp, err := encode(rep)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelError, "response not encodable", c.attrs([]slog.Attr{slog.String("error", err.Error())})...)
		resp, _ = encode(serverError)
		rep = serverError
	}
	resp.AwaitingUntil = rep.awaitingUntil
	if rep.code != "" {
		r.metrics.Refused(c.endpoint, rep.code)
	}
	if r.log.Enabled(ctx, slog.LevelInfo) {
		r.log.LogAttrs(ctx, slog.LevelInfo, "request", c.attrs([]slog.Attr{
			slog.String("method", c.method),
			slog.String("path", clip(c.path)),
			slog.Int("status", rep.status),
			slog.String("code", rep.code),
		})...)
	}
	return resp
}

// dispatch is the reference's Relay.handle, in its order: the debug page,
// the body and the handshake, the site plane, the stream lane, the daemon
// plane.
func (r *Relay) dispatch(c *call, req Request, header http.Header) (reply, error) {
	path := req.Path
	query, _ := url.ParseQuery(req.RawQuery)

	// Before the version check and before the body: not a protocol endpoint.
	if path == "/debug" || path == r.basePath+"/debug" {
		return r.debug(c, query)
	}

	// Only a POST has a body; any other verb reaches the same routes with
	// none (the reference checks no method anywhere).
	var raw []byte
	if strings.EqualFold(req.Method, http.MethodPost) {
		raw = req.Body
	}

	// The body and the handshake first, before auth and schema, and only
	// on protocol paths: a version mismatch must arrive as an answer that
	// names the disagreement and the fix, not as a bare bad-request from a
	// schema; a body that is not one JSON object in UTF-8 is refused for
	// what is wrong with it, never for a version it only seems to lack
	// (protocol.Handshake); and an unknown path such as /healthz is a 404,
	// not a description of what this relay speaks to somebody who was only
	// knocking. The literal /byollm/ is the reference's, whatever the base
	// path.
	versioned := strings.HasPrefix(path, "/byollm/") || strings.HasPrefix(path, "/relay/")
	if versioned {
		if len(raw) > MaxBodyBytes {
			return tooLargeBody(len(raw)), nil
		}
		if refusal := protocol.Handshake(raw, query); refusal != nil {
			return handshakeRefusal(*refusal), nil
		}
	}

	// The site plane, on exact paths. Its caller header differs from the
	// daemon plane's, so a signature meant for one can never be presented
	// to the other by moving the request.
	if handle, found := sitePlane[path]; found {
		s, err := r.siteRequestFor(c, raw, header, query)
		if err != nil {
			return reply{}, err
		}
		return handle(r, c, s)
	}

	// The live-stream lane, a proposed extension under its own prefix
	// (stream_plane.go), before the daemon plane's last-segment dispatch.
	if strings.HasPrefix(path, seal.StreamPrefix) {
		return r.streamPlane(c, raw, header, query)
	}

	return r.daemonPlane(c, raw, header, versioned)
}

// sitePlane is the site plane's handler for each of its exact paths.
var sitePlane = map[string]func(*Relay, *call, siteRequest) (reply, error){
	"/relay/site/enqueue": (*Relay).enqueue,
	"/relay/site/payload": (*Relay).payload,
	"/relay/site/cancel":  (*Relay).cancel,
	"/relay/site/pending": (*Relay).pending,
	"/relay/site/results": (*Relay).results,
}

// daemonEndpoints is the daemon plane's handler for each last segment.
var daemonEndpoints = map[string]func(*Relay, *call, daemonRequest) (reply, error){
	"pair":      (*Relay).pair,
	"claim":     (*Relay).claim,
	"fetch":     (*Relay).fetch,
	"result":    (*Relay).result,
	"heartbeat": (*Relay).heartbeat,
	"release":   (*Relay).release,
}

// daemonPlane answers anything under the base path, dispatched on the last
// segment alone (so /byollm/anything/claim is claim, as in the reference).
func (r *Relay) daemonPlane(c *call, raw []byte, header http.Header, versioned bool) (reply, error) {
	handle, known := daemonEndpoints[c.endpoint]
	if !strings.HasPrefix(c.path, r.basePath+"/") || !known {
		return bare(http.StatusNotFound, protocol.CodeNotFound), nil
	}
	// A base path other than /byollm/ has no handshake, as in the
	// reference; its bodies are held to the same size and the same rule
	// all the same, so a signature is only ever checked over bytes that
	// are their own text.
	if !versioned && len(raw) > 0 {
		if len(raw) > MaxBodyBytes {
			return tooLargeBody(len(raw)), nil
		}
		if problem := protocol.CheckBody(raw); problem != nil {
			return handshakeRefusal(problem.WireError()), nil
		}
	}
	// pair names its device in the body, not in a signature: it asks for
	// its own scope once it has parsed which device that is.
	if c.endpoint == "pair" {
		return handle(r, c, daemonRequest{raw: raw, header: header})
	}
	d, err := r.daemonRequestFor(c, raw, header)
	if err != nil {
		return reply{}, err
	}
	return handle(r, c, d)
}

// siteRequestFor is a site-plane request with the projection scoped to the
// site its signature names (callerOf).
func (r *Relay) siteRequestFor(c *call, raw []byte, header http.Header, query url.Values) (siteRequest, error) {
	p, err := r.cfg.Projection.Scoped(c.ctx, projection.Query{SiteID: callerOf(header, protocol.HeaderSite)})
	if err != nil {
		return siteRequest{}, err
	}
	return siteRequest{raw: raw, header: header, query: query, proj: p}, nil
}

// daemonRequestFor is a daemon-plane request with the projection scoped to
// the runner its signature names (callerOf).
func (r *Relay) daemonRequestFor(c *call, raw []byte, header http.Header) (daemonRequest, error) {
	p, err := r.cfg.Projection.Scoped(c.ctx, projection.Query{RunnerID: callerOf(header, protocol.HeaderRunner)})
	if err != nil {
		return daemonRequest{}, err
	}
	return daemonRequest{raw: raw, header: header, proj: p}, nil
}

// callerOf is the caller id a request's signature header names, or "" when
// it names none. It only picks which records to read: the handler still
// authenticates the caller against them, and refuses one this names
// wrongly, as it would with no projection at all.
func callerOf(header http.Header, caller string) string {
	sig, err := protocol.SignatureFromHeaders(header, caller)
	if err != nil {
		return ""
	}
	return sig.CallerID
}

// daemonRequest is what a daemon-plane handler reads.
type daemonRequest struct {
	raw    []byte
	header http.Header
	proj   *projection.Projection
}

// siteRequest is what a site-plane handler reads.
type siteRequest struct {
	raw    []byte
	header http.Header
	query  url.Values
	proj   *projection.Projection
}

func encode(rep reply) (Response, error) {
	h := http.Header{}
	if rep.html != "" {
		h.Set("Content-Type", "text/html; charset=utf-8")
		return Response{Status: rep.status, Header: h, Body: []byte(rep.html)}, nil
	}
	var buf []byte
	if b, ok := answerBuffers.Get().(*[]byte); ok {
		buf = (*b)[:0]
	}
	body, err := protocol.EncodeTo(buf, rep.body)
	if err != nil {
		return Response{}, err
	}
	h.Set("Content-Type", "application/json")
	return Response{Status: rep.status, Header: h, Body: body}, nil
}

// answerBuffers holds the memory of answers HTTPHandler has written, for
// the answers after them. A site's results answer lists every result until
// its deadline, megabytes at a busy site, on every poll: allocating and
// clearing one per poll, and the collections that brought, were a tenth
// of the memory relay's CPU. An answer handed to any other front end
// (Lambda's, a test's) is simply never put back.
var answerBuffers sync.Pool // of *[]byte

// recycle gives a written answer's memory to the next answer. Nothing may
// read body afterwards.
func recycle(body []byte) {
	body = body[:0]
	answerBuffers.Put(&body)
}

func requestID(ctx context.Context, h http.Header) string {
	if id := requestIDFrom(ctx); id != "" {
		return id
	}
	for _, name := range requestIDHeaders {
		if id := h.Get(name); id != "" {
			return clip(id)
		}
	}
	return ""
}
