// Package siteserver is the direct lane of a BYOLLM site, independent of
// Lambda: the six daemon endpoints of @byollm/server 0.1.1 over a
// sitestore.Store, the app the site's own
// backend calls (enqueue, job, result, cancel, runner availability,
// pairing approval, runners, revoke), that app over HTTP, and a test-only
// admin API for the conformance kit.
//
// Request in, response out: a Lambda function, the local API server and a
// plain net/http server all wrap the same Handle.
package siteserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// MaxBodyBytes is @byollm/server's body limit: the largest envelope plus
// 512 KiB of ids, checked on content-length and on the body read.
const MaxBodyBytes = protocol.MaxEnvelopeBytes + 512*1024

// Defaults of @byollm/server.
const (
	DefaultLeaseMs        = 60_000
	DefaultPairingTTLMs   = 10 * 60_000
	DefaultPollIntervalMs = 2_000
	// DefaultLivenessMs is how recently a runner must have heartbeated to
	// count as online for runner availability.
	DefaultLivenessMs = 35_000
)

// Request is one HTTP request as the server sees it.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Response is one answer. Every answer is JSON with cache-control no-store.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Config wires a server. Store and Keys are required.
type Config struct {
	Store sitestore.Store
	// Keys are the site's keypairs: supplied, never generated here. A site
	// is usually more than one process, and each generating its own would
	// give each instance a different identity that daemons pin at random.
	Keys *protocol.Keys
	// VerificationURL is the page where a user types the pairing code.
	VerificationURL string
	LeaseMs         int64 // 0 means DefaultLeaseMs
	PairingTTLMs    int64 // 0 means DefaultPairingTTLMs
	PollIntervalMs  int64 // 0 means DefaultPollIntervalMs
	LivenessMs      int64 // 0 means DefaultLivenessMs
	// BasePath is where the daemon endpoints are mounted; "" is "/byollm".
	BasePath string
	Logger   *slog.Logger
	// Cloud, when set, puts the server on the cloud lane: jobs are
	// published to a relay (cloud.go) and the daemon endpoints are not
	// served. Everything else is the same app over the same store.
	Cloud *CloudLane
	// OnStreamFault, when set, hears every stream fault of the cloud
	// lane (site.Config.OnStreamFault: a failed checkpoint write, a
	// stream ended early for a fault) after the server has logged it. It
	// must not block.
	OnStreamFault func(site.StreamFault)
}

// Server is the direct lane: the daemon endpoints plus the App. Safe for
// concurrent use; all its state is in the store.
type Server struct {
	store           sitestore.Store
	keys            *protocol.Keys
	site            protocol.PublicIdentity
	siteKeyID       string
	verificationURL string
	leaseMs         int64
	pairingTTLMs    int64
	pollIntervalMs  int64
	livenessMs      int64
	basePath        string
	log             *slog.Logger
	onStreamFault   func(site.StreamFault)
	// cloud is the cloud lane's transport, nil on the direct lane.
	cloud *site.Client
	// watch is the streaming jobs this process published, for one warning
	// each if no device that streams claims them (waiting.go).
	watch streamWatch
}

// New builds a server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("siteserver: Config.Store is required")
	}
	if cfg.Keys == nil {
		return nil, errors.New("siteserver: Config.Keys is required (the site's keys are supplied, never generated per process)")
	}
	if !protocol.VerifyPublicIdentity(cfg.Keys.Public()) {
		return nil, errors.New("siteserver: the site's encryption key is not signed by its identity key")
	}
	s := &Server{
		store:           cfg.Store,
		keys:            cfg.Keys,
		site:            cfg.Keys.Public(),
		siteKeyID:       cfg.Keys.KeyID(),
		verificationURL: cfg.VerificationURL,
		leaseMs:         orDefault(cfg.LeaseMs, DefaultLeaseMs),
		pairingTTLMs:    orDefault(cfg.PairingTTLMs, DefaultPairingTTLMs),
		pollIntervalMs:  orDefault(cfg.PollIntervalMs, DefaultPollIntervalMs),
		livenessMs:      orDefault(cfg.LivenessMs, DefaultLivenessMs),
		basePath:        strings.TrimRight(cfg.BasePath, "/"),
		log:             cfg.Logger,
		onStreamFault:   cfg.OnStreamFault,
	}
	if s.basePath == "" {
		s.basePath = "/byollm"
	}
	if s.verificationURL == "" && cfg.Cloud == nil {
		return nil, errors.New("siteserver: Config.VerificationURL is required (where a user approves a code)")
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Cloud != nil {
		c, err := newCloudClient(s, *cfg.Cloud)
		if err != nil {
			return nil, err
		}
		s.cloud = c
	}
	return s, nil
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

// SiteKeyID is the site's key id, as stubs name it.
func (s *Server) SiteKeyID() string { return s.siteKeyID }

// LeaseMs is the lease the server grants.
func (s *Server) LeaseMs() int64 { return s.leaseMs }

// reply is an answer before encoding.
type reply struct {
	status int
	body   any
}

func ok(body any) reply { return reply{status: http.StatusOK, body: body} }

func fail(code, message string) reply {
	return wireReply(protocol.NewWireError(code, message))
}

// wireReply serves a wire error body with the status of its code.
func wireReply(body protocol.WireError) reply {
	return reply{status: protocol.StatusOf(body.Error), body: body}
}

var serverError = fail(protocol.CodeServerError, "the site could not answer this request; try again shortly")

// encode writes a reply with the headers every answer carries.
func encode(rep reply) Response {
	body, err := protocol.Encode(rep.body)
	if err != nil {
		rep = serverError
		body, _ = protocol.Encode(rep.body)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	return Response{Status: rep.status, Header: h, Body: body}
}

// Handle answers one daemon-plane request. It never fails: a store error
// is a 500 server-error, contention a 503 the daemon retries.
func (s *Server) Handle(ctx context.Context, req Request) Response {
	rep, endpoint, err := s.dispatch(ctx, req)
	switch {
	case errors.Is(err, sitestore.ErrContention):
		s.log.LogAttrs(ctx, slog.LevelWarn, "store contention", slog.String("endpoint", endpoint), slog.String("error", err.Error()))
		rep = reply{status: http.StatusServiceUnavailable, body: protocol.NewWireError(protocol.CodeServerError, "the site is busy with this job; try again shortly")}
	case err != nil:
		s.log.LogAttrs(ctx, slog.LevelError, "request failed", slog.String("endpoint", endpoint), slog.String("error", err.Error()))
		rep = serverError
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("endpoint", endpoint), slog.Int("status", rep.status))
	return encode(rep)
}

// endpoints are the six daemon endpoints.
var endpoints = []string{"pair", "claim", "heartbeat", "fetch", "result", "release"}

// dispatch is @byollm/server's processing order: method and path, body
// limit and JSON, version (before auth), then the endpoint, whose
// authenticated ones go on with signature, revocation, schema and runner id.
func (s *Server) dispatch(ctx context.Context, req Request) (reply, string, error) {
	// Exact base path, no suffix matching: /x/byollm/claim is not claim.
	path := strings.TrimSuffix(req.Path, "/")
	rest, found := strings.CutPrefix(path, s.basePath+"/")
	if s.cloud != nil {
		// On the cloud lane daemons reach the site's jobs through its relay;
		// serving them here too would let one job run twice.
		return fail(protocol.CodeNotFound, "this site serves its daemons through a relay"), "", nil
	}
	if !found || !contains(endpoints, rest) {
		return fail(protocol.CodeNotFound, fmt.Sprintf("not a %s endpoint", s.basePath)), "", nil
	}
	endpoint := rest
	if req.Method != http.MethodPost {
		return reply{status: http.StatusMethodNotAllowed, body: protocol.NewWireError(protocol.CodeBadRequest, "protocol endpoints accept POST only")}, endpoint, nil
	}
	if len(req.Body) > MaxBodyBytes {
		return fail(protocol.CodeBadRequest, protocol.TooLargeMessage(int64(len(req.Body)), MaxBodyBytes)), endpoint, nil
	}
	// The body before the version, as the reference server orders it: a
	// body that is not one JSON object in UTF-8 is a bad-request that says
	// what is wrong (protocol.CheckBody), never a version it only seems to
	// lack. Everything after this reads bytes that are their own text, so
	// a signature is checked over exactly what the daemon hashed.
	body := protocol.ParseBody(req.Body)
	if problem := body.Check(); problem != nil {
		return wireReply(problem.WireError()), endpoint, nil
	}
	if refusal := body.CheckVersion(nil); refusal != nil {
		return wireReply(*refusal), endpoint, nil
	}
	d := daemonCall{ctx: ctx, endpoint: endpoint, raw: req.Body, body: body, header: protocol.CanonicalHeader(req.Header)}
	var rep reply
	var err error
	switch endpoint {
	case "pair":
		rep, err = s.pair(d)
	case "claim":
		rep, err = s.claim(d)
	case "heartbeat":
		rep, err = s.heartbeat(d)
	case "fetch":
		rep, err = s.fetch(d)
	case "result":
		rep, err = s.result(d)
	default:
		rep, err = s.release(d)
	}
	return rep, endpoint, err
}

// daemonCall is one daemon request in flight.
type daemonCall struct {
	ctx      context.Context
	endpoint string
	raw      []byte
	body     *protocol.Body
	header   http.Header
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
