package relay

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// request is one request as the relay reads it: its body parsed once
// (readBody) and its plane's signature header parsed once (readSignature),
// whatever reads them after. A second parse of the body is a second full
// scan of a 6 MiB result, and two readers of one header are two places
// that could disagree about who is calling. This file is the only one
// that calls the protocol's parsers on a request (TestOneParsePerRequest).
type request struct {
	raw    []byte
	header http.Header
	query  url.Values
	// body is raw parsed, once the plane's size bound passed.
	body *protocol.Body
	// sig is the signature header of the plane that authenticates the
	// request; sigErr is protocol.ErrUnsigned when it is absent or
	// malformed.
	sig    protocol.RequestSignature
	sigErr error
	// proj is the projection scoped to the caller the signature names
	// (scope), read by the plane's auth and its handler.
	proj *projection.Projection
}

// readBody holds the request to its size bound, then parses the body,
// once, and applies the body rule: the handshake (protocol.Handshake) on a
// protocol path, CheckBody alone on a base path other than /byollm/, which
// has no handshake, as in the reference, but whose bodies are held to the
// same rule all the same, so a signature is only ever checked over bytes
// that are their own text. A non-nil reply is the refusal.
func (r *Relay) readBody(c *call, q *request, handshake bool) *reply {
	if strings.HasPrefix(c.path, seal.StreamPrefix) && len(q.raw) > maxStreamBody {
		rep := fail(http.StatusBadRequest, protocol.CodeBadRequest, "a stream request is at most 64 KiB")
		return &rep
	}
	if len(q.raw) > MaxBodyBytes {
		rep := tooLargeBody(len(q.raw))
		return &rep
	}
	q.body = protocol.ParseBody(q.raw)
	r.counted("body")
	if handshake {
		if refusal := q.body.Handshake(q.query); refusal != nil {
			rep := handshakeRefusal(*refusal)
			return &rep
		}
		return nil
	}
	if len(q.raw) > 0 {
		if problem := q.body.Check(); problem != nil {
			rep := handshakeRefusal(problem.WireError())
			return &rep
		}
	}
	return nil
}

// readSignature parses the signature header, once: callerHeader is the
// plane's (protocol.HeaderRunner or protocol.HeaderSite), and the other
// plane's is never read.
func (r *Relay) readSignature(q *request, callerHeader string) {
	q.sig, q.sigErr = protocol.SignatureFromHeaders(q.header, callerHeader)
	r.counted("signature")
}

// counted tells a test's counter of one parse.
func (r *Relay) counted(what string) {
	if r.countParse != nil {
		r.countParse(what)
	}
}

// callerID is the caller id the signature header names, or "" when it
// names none. It only picks which records to read: the plane's auth still
// authenticates the caller against them, and refuses one this names
// wrongly, as it would with no projection at all.
func (q *request) callerID() string {
	if q.sigErr != nil {
		return ""
	}
	return q.sig.CallerID
}

// scope reads the projection for the caller the signature names.
func (r *Relay) scope(c *call, q *request, want projection.Query) error {
	p, err := r.cfg.Projection.Scoped(c.ctx, want)
	if err != nil {
		return err
	}
	q.proj = p
	return nil
}

// endpoint answers one request on a path a dispatch table names.
type endpoint func(r *Relay, c *call, q *request) (reply, error)

// decodable is a request type a plane decodes into: Req's pointer, which
// is the protocol.Validator.
type decodable[Req any] interface {
	*Req
	protocol.Validator
}

// authed is an endpoint whose handler runs only once authenticate passed,
// and is handed what it established: who signed (the principal: a caller
// on the daemon plane, a site id on the site plane) and what they asked,
// decoded and within the store's bounds. authenticate is authDaemon or
// authSite; the refusal it returns is served as it is, and an error is a
// store failure. Nothing about the request is repeated in the handler.
func authed[Who, Req any](
	authenticate func(r *Relay, c *call, q *request) (Who, Req, *reply, error),
	handle func(r *Relay, c *call, q *request, who Who, req Req) (reply, error),
) endpoint {
	return func(r *Relay, c *call, q *request) (reply, error) {
		who, req, refusal, err := authenticate(r, c, q)
		if refusal != nil || err != nil {
			return deref(refusal), err
		}
		return handle(r, c, q, who, req)
	}
}

// deref returns the refusal a plane's auth produced, or the zero reply when
// it produced an error instead.
func deref(rep *reply) reply {
	if rep == nil {
		return reply{}
	}
	return *rep
}
