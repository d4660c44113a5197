// Package relay is the BYOLLM relay's two planes, independent of Lambda: a
// request goes in as method, path, headers and raw body bytes, and a
// response comes out. It ports @byollm/relay 0.1.1: both planes, their
// refusals and the debug endpoints.
//
// The relay is blind by construction: Config has no field that can hold a
// private key, and nothing here can open an envelope. It routes stubs, hands
// over ciphertext and knows who is online.
package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/store"
)

// Request is one HTTP request, already read. Path is the URL path as sent,
// percent-encoding intact (url.URL.EscapedPath(), API Gateway's rawPath),
// because the reference dispatches on the WHATWG pathname, which is not
// decoded: /byollm/cl%61im is not claim there either. RawQuery is the part
// after '?'. Body is the raw bytes: signatures are over these exact bytes,
// so nothing may re-encode them on the way in. Header keys may be in any
// case.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// SourceIP is the address the request came from, as the front end saw
	// it (API Gateway's requestContext.http.sourceIp), never a header a
	// client could set. Behind the edge it is CloudFront's, and a request
	// that passed the origin lock is counted by the viewer's address
	// instead (callerAddress). "" when the front end does not say and no
	// viewer address stands in: then pairing is throttled per key only.
	SourceIP string
}

// Response is what to send back. Header always carries content-type.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// ProjectionSource hands the relay the control plane's current projection.
// Asked once per request, so a change is in force on the next request
// (revocation must not wait for a heartbeat, or for a process to restart).
type ProjectionSource interface {
	// Scoped is the projection of the records that decide a request about
	// q (projection.Fixture.Scope), read as of now. Every protocol request
	// asks this, so a source can read those records alone instead of the
	// whole projection.
	Scoped(ctx context.Context, q projection.Query) (*projection.Projection, error)
	// Projection is the whole projection, for the debug page only.
	Projection(ctx context.Context) (*projection.Projection, error)
}

// StaticProjection is a ProjectionSource held in memory, replaced wholesale
// with Set (the reference's relay.project(fixture)). For tests and the local
// server.
type StaticProjection struct {
	mu sync.RWMutex
	p  *projection.Projection
}

// NewStaticProjection holds p.
func NewStaticProjection(p *projection.Projection) *StaticProjection {
	return &StaticProjection{p: p}
}

// Set replaces the projection: a control-plane push.
func (s *StaticProjection) Set(p *projection.Projection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p = p
}

// Scoped returns the scope of the current projection for q. Built from the
// held projection on every call, so the relay's tests run on exactly what a
// per-record source hands it.
func (s *StaticProjection) Scoped(ctx context.Context, q projection.Query) (*projection.Projection, error) {
	p, err := s.Projection(ctx)
	if err != nil {
		return nil, err
	}
	return projection.New(p.Fixture().Scope(q))
}

// Projection returns the current projection.
func (s *StaticProjection) Projection(context.Context) (*projection.Projection, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.p == nil {
		return nil, errors.New("relay: no projection set")
	}
	return s.p, nil
}

// Verdict is Satisfiable's answer.
type Verdict string

const (
	VerdictOK          Verdict = "ok"
	VerdictNotDeclared Verdict = "not-declared"
	VerdictUnmapped    Verdict = "unmapped"
	VerdictWaiting     Verdict = "waiting"
)

// SatisfiableQuery is the enqueue-time question. Purpose is "" when the stub
// names none.
type SatisfiableQuery struct {
	SiteID  string
	Owner   string
	Purpose string
	Kind    string
	// Projection is the projection the enqueue read (its site's scope),
	// which holds the site's declared purposes, so the answer need not read
	// the site again.
	Projection *projection.Projection
}

// Satisfiable asks whoever holds the mappings (the control plane) whether a
// purpose can be satisfied for this person. An error is answered 503
// server-error: a failed read is not a negative answer.
type Satisfiable func(ctx context.Context, q SatisfiableQuery) (Verdict, error)

// Config is a relay's wiring. Store, Projection are required.
type Config struct {
	Store store.RoutingStore
	// Pairing holds device-code pairings, shared across replicas. With no
	// Pairing or no VerificationURL the device-code flow answers 501.
	Pairing store.PairingCodes
	// VerificationURL is where a human approves a code: the control plane's
	// own URL, given rather than derived.
	VerificationURL string
	Projection      ProjectionSource
	// Clock is the relay's local clock: signature freshness, serverTime,
	// the retirement window and the retry-after not-before. Deliberately not
	// the store's clock (freshness is about the caller's clock versus this
	// process's). Nil means clock.System.
	Clock clock.Clock
	// LeaseMs is the lease length; 0 means store.DefaultLeaseMs.
	LeaseMs int64
	// BasePath is where the daemon plane is mounted; "" means "/byollm".
	// Trailing slashes are stripped.
	BasePath string
	// Debug serves /debug (per site). Off unless somebody asks: on anything
	// reachable from the internet it is an anonymous metadata read.
	Debug bool
	// ControlPlanePublic is the grant-signing key handed to daemons at
	// pairing. Setting it without AuthorGrant is refused by New.
	ControlPlanePublic string
	AuthorGrant        grant.Author
	// Satisfiable is asked at enqueue when set; nil refuses nothing.
	Satisfiable Satisfiable
	// AwaitingOpened, when set, is told after a claim that granted work
	// when the first awaiting-payload window it opened closes (epoch ms,
	// store clock), as the store stamped it (store.Claimed), and is told
	// nothing of any other answer. A site that has not sealed by then
	// loses the grant, and nothing in-line may notice: a front end that
	// can wake a sweep for that moment does it here. Called on the
	// request's context before Handle returns; it cannot change the
	// answer, so a failure to wake is its own to log.
	AwaitingOpened func(ctx context.Context, untilMs int64)
	// Streams tunes the live-stream attach (docs/streaming.md); the lane
	// is served when Store also implements store.StreamLog.
	Streams StreamOptions
	// UpdateOffer is a daemon version offered in heartbeats; "" offers
	// nothing. DaemonFloor is the oldest daemon served; "" refuses nobody.
	UpdateOffer string
	DaemonFloor string
	// OriginSecrets locks the relay to its edge: with it set, a request
	// without one of its values in OriginSecretHeader is refused 403 before
	// anything else is read. Nil serves everyone (no edge in front).
	OriginSecrets OriginSecrets
	// Logger receives one JSON-able record per decision; nil discards.
	Logger *slog.Logger
	// Metrics counts what the relay did; nil counts nothing.
	Metrics Metrics
}

// Relay is a running relay: one handler, two planes, one debug page. Safe
// for concurrent use; it holds no routing state of its own.
type Relay struct {
	cfg      Config
	store    store.RoutingStore
	clock    clock.Clock
	leaseMs  int64
	basePath string
	log      *slog.Logger
	metrics  Metrics
	// rows keeps results rows encoded between polls (result_rows.go).
	rows resultRows
	// countParse, set only by a test (CountParses), is told of each parse
	// of a request's body or signature header.
	countParse func(what string)
}

// ErrGrantsWithoutAuthor is New's refusal of a relay that would tell devices
// to expect signed grants and never send one: every job would be refused at
// the device, with this process reporting itself healthy throughout.
var ErrGrantsWithoutAuthor = errors.New("controlPlanePublic is set but authorGrant is not: devices would be " +
	"told to expect signed grants that nothing here can produce, and " +
	"would refuse every job")

// New builds a relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Store == nil {
		return nil, errors.New("relay: Config.Store is required")
	}
	if cfg.Projection == nil {
		return nil, errors.New("relay: Config.Projection is required")
	}
	if cfg.ControlPlanePublic != "" && cfg.AuthorGrant == nil {
		return nil, ErrGrantsWithoutAuthor
	}
	r := &Relay{
		cfg:      cfg,
		store:    cfg.Store,
		clock:    cfg.Clock,
		leaseMs:  cfg.LeaseMs,
		basePath: strings.TrimRight(cfg.BasePath, "/"),
		log:      cfg.Logger,
		metrics:  cfg.Metrics,
	}
	if r.clock == nil {
		r.clock = clock.System{}
	}
	if r.leaseMs == 0 {
		r.leaseMs = store.DefaultLeaseMs
	}
	if cfg.BasePath == "" {
		r.basePath = "/byollm"
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.metrics == nil {
		r.metrics = NopMetrics{}
	}
	return r, nil
}

// now is the relay-local clock in epoch ms.
func (r *Relay) now() int64 { return r.clock.Now().UnixMilli() }

// SweepPages is Sweep in bounded memory, the scheduled sweeper's call: a
// store that sweeps page by page (store.PagedSweeper) has each page's jobs
// logged as it goes, counted once at the end, and answers counts only; any other store
// is swept whole. The streams are swept even when some due item failed:
// the failure is the store's, and their sweep does not depend on it.
func (r *Relay) SweepPages(ctx context.Context) (store.SweepStats, error) {
	p, ok := r.store.(store.PagedSweeper)
	if !ok {
		res, err := r.Sweep(ctx)
		return store.SweepStats{Requeued: len(res.Requeued), Removed: len(res.Removed)}, err
	}
	var mu sync.Mutex
	stats, err := p.SweepPages(ctx, func(page store.SweepResult) {
		mu.Lock()
		defer mu.Unlock()
		r.logSweep(ctx, "scheduled", page)
	})
	// Counted once a run, as Sweep counts it: a count per page would
	// inflate the Sweeps metric by the number of pages.
	if stats.Requeued+stats.Removed > 0 {
		r.metrics.Swept(stats.Requeued, stats.Removed)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return stats, err
	}
	return stats, errors.Join(err, r.sweepStreams(ctx))
}

// Sweep fires everything the store's clock says is due and reports it: the
// scheduled sweeper's call. Claims, heartbeats and pending run a bounded
// in-line sweep (store.SweepInline) so no request carries an outage's
// backlog; this one is complete, so a job whose site vanished goes back to
// the queue without waiting for somebody to ask.
func (r *Relay) Sweep(ctx context.Context) (store.SweepResult, error) {
	res, err := r.store.Sweep(ctx)
	if err != nil {
		return store.SweepResult{}, err
	}
	r.noteSweep(ctx, "scheduled", res)
	if err := r.sweepStreams(ctx); err != nil {
		return res, err
	}
	return res, nil
}
