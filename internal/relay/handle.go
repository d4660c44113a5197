package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

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
	// awaitingUntil is what Config.AwaitingOpened is told, 0 for nothing.
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
	if rep.awaitingUntil != 0 && r.cfg.AwaitingOpened != nil {
		r.cfg.AwaitingOpened(ctx, rep.awaitingUntil)
	}
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
	query, _ := url.ParseQuery(req.RawQuery)

	// Before the version check and before the body: not a protocol endpoint.
	if c.path == "/debug" || c.path == r.basePath+"/debug" {
		return r.debug(c, query)
	}

	// Only a POST has a body; any other verb reaches the same routes with
	// none (the reference checks no method anywhere).
	q := &request{header: header, query: query}
	if strings.EqualFold(req.Method, http.MethodPost) {
		q.raw = req.Body
	}

	// The body and the handshake first, before auth and schema, and only
	// on protocol paths: a version mismatch must arrive as an answer that
	// names the disagreement and the fix, not as a bare bad-request from a
	// schema; a body that is not one JSON object in UTF-8 is refused for
	// what is wrong with it, never for a version it only seems to lack
	// (protocol.Handshake); and an unknown path such as /healthz is a 404,
	// not a description of what this relay speaks to somebody who was only
	// knocking. The literal /byollm/ is the reference's, whatever the base
	// path; the stream lane checks the same, under its own smaller bound.
	handle := r.route(c)
	handshake := strings.HasPrefix(c.path, "/byollm/") || strings.HasPrefix(c.path, "/relay/") ||
		strings.HasPrefix(c.path, seal.StreamPrefix)
	if handle == nil && !handshake {
		return bare(http.StatusNotFound, protocol.CodeNotFound), nil
	}
	if refusal := r.readBody(c, q, handshake); refusal != nil {
		return *refusal, nil
	}
	if handle == nil {
		return bare(http.StatusNotFound, protocol.CodeNotFound), nil
	}
	return handle(r, c, q)
}

// route is the endpoint for a request's path, nil when there is none: the
// site plane on exact paths, the live-stream lane (a proposed extension
// under its own prefix, stream_plane.go) on exact paths, then the daemon
// plane on the last segment under the base path (so /byollm/anything/claim
// is claim, as in the reference). The site plane's caller header differs
// from the daemon plane's, so a signature meant for one can never be
// presented to the other by moving the request.
func (r *Relay) route(c *call) endpoint {
	if handle, found := sitePlane[c.path]; found {
		return handle
	}
	if strings.HasPrefix(c.path, seal.StreamPrefix) {
		return streamLane[c.path]
	}
	if strings.HasPrefix(c.path, r.basePath+"/") {
		return daemonPlane[c.endpoint]
	}
	return nil
}

// sitePlane is the site plane's endpoint for each of its exact paths.
var sitePlane = map[string]endpoint{
	"/relay/site/enqueue": authed(authSite[protocol.EnqueueRequest], (*Relay).enqueue),
	"/relay/site/payload": authed(authSite[protocol.PayloadRequest], (*Relay).payload),
	"/relay/site/cancel":  authed(authSite[protocol.CancelRequest], (*Relay).cancel),
	"/relay/site/pending": authed(authSite[protocol.QueryRequest], (*Relay).pending),
	"/relay/site/results": withBody(
		authed(authSite[protocol.CollectRequest], (*Relay).collect),
		authed(authSite[protocol.QueryRequest], (*Relay).results)),
}

// withBody is with for a request that has a body, without for one that
// has none: the results path is a read, and with a body a collect.
func withBody(with, without endpoint) endpoint {
	return func(r *Relay, c *call, q *request) (reply, error) {
		if len(q.raw) > 0 {
			return with(r, c, q)
		}
		return without(r, c, q)
	}
}

// daemonPlane is the daemon plane's endpoint for each last segment. pair
// is unauthenticated: a machine with no pairing has no credential.
var daemonPlane = map[string]endpoint{
	"pair":      (*Relay).pair,
	"claim":     authed(authDaemon[protocol.ClaimRequest], (*Relay).claim),
	"fetch":     authed(authDaemon[protocol.FetchRequest], (*Relay).fetch),
	"result":    authed(authDaemon[protocol.ResultRequest], (*Relay).result),
	"heartbeat": authed(authDaemon[protocol.HeartbeatRequest], (*Relay).heartbeat),
	"release":   authed(authDaemon[protocol.ReleaseRequest], (*Relay).release),
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
