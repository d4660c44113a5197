// Package daemon is a BYOLLM device: the Go counterpart of the `byollm`
// daemon's relay loop.
//
// A daemon pairs with a relay through the device-code flow, then loops:
// heartbeat (renewing the leases it holds, learning which sites it serves
// and which of its jobs were cancelled or lost), claim, and for each
// claimed job, in its own goroutine: check the job against its own rules,
// fetch the payload (waiting while the site has not sealed it yet), open it
// and verify it against the pinned site key the stub names, run it on a
// Backend, seal the outcome back to that site and report it. On shutdown it
// releases what it holds, after each open live stream has posted its end
// frame `interrupted` (at most StreamEndBound, 3 s).
//
// A live stream outlasts a relay outage: an append whose tries all fail is
// a stall (EventStreamStalled, counted by StreamStalls), backed off, with
// the text gathered into the next frame; only a refusal ends the stream.
//
// The relay is trusted with nothing it could lie about: sites are pinned,
// payloads are verified against the pin, and on a relay with a control
// plane every job must carry a grant signed by the key pinned at pairing.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
)

// Version is the daemon version this package reports in heartbeats.
const Version = "0.1.1"

// Clock is the daemon's time source. It is the store's clock type, so one
// test clock drives a site, a daemon and a relay alike: anything with a Now
// method.
type Clock = clock.Clock

// DefaultHeartbeatInterval is an idle daemon's tick: one heartbeat and
// one claim. The relay's route throttles are sized from it
// (docs/sizing.md); a shorter one multiplies a fleet's requests.
const DefaultHeartbeatInterval = 10 * time.Second

// Config wires a Daemon. RelayURL, Keys and Backend are required; Pairing
// is filled by Pair, or restored from a saved State.
type Config struct {
	RelayURL string
	Keys     *protocol.Keys
	Backend  Backend
	Pairing  Pairing
	// Service is the service name advertised for each kind; "" means
	// "default".
	Service string
	// OfferScope is "private" (the owner's own work only, the default) or
	// "team" (also work the control plane grants from the owner's rosters).
	OfferScope string
	// Kinds are the job kinds offered; nil means llm.generate and llm.chat.
	Kinds []string
	// Concurrency bounds jobs in flight; 0 means 2 (the reference's
	// default).
	Concurrency int
	// DaemonVersion is reported in heartbeats; "" means Version.
	DaemonVersion string
	// HeartbeatInterval is the longest Run waits between ticks, and so
	// bounds how long a lease goes unrenewed; 0 means
	// DefaultHeartbeatInterval. Keep it well under the relay's lease.
	HeartbeatInterval time.Duration
	HTTPClient        *http.Client
	Clock             Clock
	// Sleep waits (fetch retries, the Run loop, pairing polls); nil waits
	// on a timer. Tests inject one.
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
	// OnEvent, when set, is told what the daemon does, in order, from
	// several goroutines. It must not block.
	OnEvent func(Event)
	// Streams opts in to live streams (docs/streaming.md): jobs whose stub
	// asks for streaming are offered to this daemon, and it streams their
	// text through the relay as it is produced, when the backend can.
	Streams Streaming
}

// Event is one thing the daemon did, for logs and for the demo.
type Event struct {
	Type   EventType
	JobID  string
	Site   string
	Detail string
}

// EventType names an Event.
type EventType string

const (
	EventPaired         EventType = "paired"
	EventClaimed        EventType = "claimed"
	EventRefused        EventType = "refused"
	EventWaiting        EventType = "waiting-for-payload"
	EventOpened         EventType = "opened"
	EventRunning        EventType = "running"
	EventReported       EventType = "reported"
	EventCancelled      EventType = "cancelled"
	EventLost           EventType = "lost"
	EventSitePinned     EventType = "site-pinned"
	EventSiteRefused    EventType = "site-refused"
	EventSiteRotated    EventType = "site-rotated"
	EventSiteDropped    EventType = "site-dropped"
	EventRevoked        EventType = "revoked"
	EventError          EventType = "error"
	EventReleased       EventType = "released"
	EventServingNothing EventType = "serving-nothing"
	// EventStreamStalled: a stream append failed all its tries; the stream
	// goes on, backing off, and the text gathers into the next frame.
	// Daemon.StreamStalls counts them.
	EventStreamStalled EventType = "stream-stalled"
	// EventStreamResumed: a stalled stream's frame was appended.
	EventStreamResumed EventType = "stream-resumed"
)

// ErrRevoked is returned once the relay has said this device is revoked:
// the pairing is over and the daemon takes no more work.
var ErrRevoked = errors.New("daemon: this device has been revoked")

// ErrNotPaired is returned by Tick before a pairing exists.
var ErrNotPaired = errors.New("daemon: not paired")

// Daemon is one device. Tick, Run and Shutdown are safe to call from
// different goroutines.
type Daemon struct {
	relayURL     string
	keys         *protocol.Keys
	backend      Backend
	capabilities []protocol.Capability
	concurrency  int
	version      string
	interval     time.Duration
	http         *http.Client
	clock        Clock
	sleep        func(ctx context.Context, d time.Duration) error
	log          *slog.Logger
	onEvent      func(Event)
	streams      Streaming

	tickMu sync.Mutex // one heartbeat-and-claim at a time

	mu      sync.Mutex
	pairing Pairing
	// retiring holds superseded site ids still served until a deadline on
	// this machine's clock (a rotation is not instant on the wire).
	retiring map[string]int64
	active   map[string]*held // by lease id
	// spentGrants are grant ids already admitted, until they expire: a
	// grant admits one job, once.
	spentGrants map[string]int64
	// gaveUp counts fetches that found no job, by site and job id: a 404
	// can be a slow seal (the relay requeued the claim), so the job is
	// refused only after it happens a few times.
	gaveUp   map[string]gaveUp
	revoked  bool
	stopping bool
	lastBeat time.Time // when the last successful heartbeat was sent
	// servingNothing is whether the last heartbeat named no site.
	servingNothing bool

	jobs sync.WaitGroup
	// streamsOpen counts live streams whose end frame is not yet posted;
	// Shutdown waits for it (at most StreamEndBound) before releasing. It
	// is added to only by openStream.
	streamsOpen  sync.WaitGroup
	streamStalls atomic.Int64
	// life ends every job's context on Shutdown.
	life     context.Context
	lifeStop context.CancelFunc
}

// held is a lease this daemon works under.
type held struct {
	jobID  string
	site   string
	cancel context.CancelCauseFunc
	// stopped: the job's context was already ended (by a cancel, a loss);
	// what is said of it is said once.
	stopped bool
}

// Why a job's context ended. A cancel from the site is answered with a
// "canceled" outcome; a lost lease and a shutdown are not answered at all
// (the relay no longer counts this device as the holder, or is about to be
// told so by the release).
var (
	errCancelledBySite = errors.New("the site cancelled the job")
	errLost            = errors.New("the relay says this lease is no longer held")
	errShutdown        = errors.New("the daemon is shutting down")
	errSiteWithdrawn   = errors.New("the site's consent ended while the job ran")
)

// New checks the configuration and returns a daemon.
func New(cfg Config) (*Daemon, error) {
	if cfg.RelayURL == "" || cfg.Keys == nil || cfg.Backend == nil {
		return nil, errors.New("daemon: RelayURL, Keys and Backend are required")
	}
	info := cfg.Backend.Info()
	if !contains(protocol.BackendIDs, info.ID) || (info.Class != "http" && info.Class != "process") || info.Model == "" {
		return nil, fmt.Errorf("daemon: backend %q/%q/%q is not a protocol backend id, class and model", info.ID, info.Class, info.Model)
	}
	service := cfg.Service
	if service == "" {
		service = "default"
	}
	scope := cfg.OfferScope
	if scope == "" {
		scope = "private"
	}
	kinds := cfg.Kinds
	if kinds == nil {
		kinds = []string{protocol.KindGenerate, protocol.KindChat}
	}
	caps := make([]protocol.Capability, 0, len(kinds))
	for _, k := range kinds {
		caps = append(caps, protocol.Capability{
			Kind: k, Service: service, BackendID: info.ID, BackendClass: info.Class, Model: info.Model, OfferScope: scope,
		})
	}
	d := &Daemon{
		streams:      cfg.Streams,
		relayURL:     strings.TrimRight(cfg.RelayURL, "/"),
		keys:         cfg.Keys,
		backend:      cfg.Backend,
		capabilities: caps,
		concurrency:  cfg.Concurrency,
		version:      cfg.DaemonVersion,
		interval:     cfg.HeartbeatInterval,
		http:         cfg.HTTPClient,
		clock:        cfg.Clock,
		sleep:        cfg.Sleep,
		log:          cfg.Logger,
		onEvent:      cfg.OnEvent,
		pairing:      cfg.Pairing.clone(),
		retiring:     map[string]int64{},
		active:       map[string]*held{},
		spentGrants:  map[string]int64{},
		gaveUp:       map[string]gaveUp{},
	}
	if d.concurrency <= 0 {
		d.concurrency = 2
	}
	if d.version == "" {
		d.version = Version
	}
	if d.interval <= 0 {
		d.interval = DefaultHeartbeatInterval
	}
	if d.http == nil {
		d.http = defaultHTTPClient(d.concurrency)
	}
	if d.clock == nil {
		d.clock = clock.System{}
	}
	if d.sleep == nil {
		d.sleep = clock.Sleep
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.life, d.lifeStop = context.WithCancel(context.Background())
	return d, nil
}

func (d *Daemon) now() int64 { return d.clock.Now().UnixMilli() }

func (d *Daemon) runnerID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pairing.RunnerID
}

// Pairing is a copy of the current pairing (pins included), for saving.
func (d *Daemon) Pairing() Pairing {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pairing.clone()
}

// Capabilities is the matrix this daemon advertises.
func (d *Daemon) Capabilities() []protocol.Capability {
	return append([]protocol.Capability(nil), d.capabilities...)
}

// Active is how many jobs are in flight.
func (d *Daemon) Active() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.active)
}

// StreamStalls is how many stream appends have failed all their tries
// since the daemon started (each also emitted as EventStreamStalled).
func (d *Daemon) StreamStalls() int64 { return d.streamStalls.Load() }

func (d *Daemon) emit(e Event) {
	if e.Type == EventError || e.Type == EventRefused || e.Type == EventStreamStalled {
		d.log.Warn(string(e.Type), "job", e.JobID, "site", e.Site, "detail", e.Detail)
	} else {
		d.log.Info(string(e.Type), "job", e.JobID, "site", e.Site, "detail", e.Detail)
	}
	if d.onEvent != nil {
		d.onEvent(e)
	}
}

// stop ends a held job's context with cause; false if not held, or
// already stopped (a heartbeat naming a cancel that an append already
// told: the first cause stands).
func (d *Daemon) stop(leaseID string, cause error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.active[leaseID]
	if !ok || h.stopped {
		return false
	}
	h.stopped = true
	h.cancel(cause)
	return true
}

// settle forgets a lease once its job is over, freeing the slot.
func (d *Daemon) settle(leaseID string, cancel context.CancelCauseFunc) {
	cancel(nil)
	d.mu.Lock()
	delete(d.active, leaseID)
	d.mu.Unlock()
}

// checkRevoked turns a `revoked` refusal into the end of the pairing.
func (d *Daemon) checkRevoked(err error) error {
	if kindOf(err) != KindRevoked {
		return err
	}
	d.mu.Lock()
	already := d.revoked
	d.revoked = true
	for _, h := range d.active {
		h.cancel(errShutdown)
	}
	d.mu.Unlock()
	if !already {
		d.emit(Event{Type: EventRevoked, Detail: err.Error()})
	}
	return ErrRevoked
}

// openStream counts a stream in, unless Shutdown has begun. Shutdown sets
// stopping under d.mu before it waits on streamsOpen, so every Add here is
// ordered before that Wait: an Add from zero racing the Wait breaks the
// WaitGroup's contract, and the stream it let in would post its end after
// the release.
func (d *Daemon) openStream() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return false
	}
	d.streamsOpen.Add(1)
	return true
}

// Shutdown stops taking work, stops the jobs in flight without reporting
// them, lets each open stream post its end frame `interrupted` (waiting at
// most StreamEndBound, provided the backend returns when its context ends),
// releases their leases with reason "shutdown" (so the relay offers them
// again at once rather than after the lease lapses) and waits for the job
// goroutines to end. The release comes after the ends: the relay refuses
// an end under a released lease.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.stopping = true
	runnerID := d.pairing.RunnerID
	leases := make([]protocol.GrantRef, 0, len(d.active))
	for leaseID, h := range d.active {
		leases = append(leases, protocol.GrantRef{JobID: h.jobID, LeaseID: leaseID})
		h.cancel(errShutdown)
	}
	d.mu.Unlock()
	d.lifeStop()

	drained := make(chan struct{})
	go func() { d.streamsOpen.Wait(); close(drained) }()
	bound := time.NewTimer(StreamEndBound)
	select {
	case <-drained:
	case <-bound.C:
	case <-ctx.Done():
	}
	bound.Stop()

	var err error
	if len(leases) > 0 && runnerID != "" {
		var resp protocol.ReleaseResponse
		err = d.post(ctx, "release", protocol.ReleaseRequest{
			ProtocolVersion: protocol.ProtocolVersion, RunnerID: runnerID, Leases: leases, Reason: "shutdown",
		}, &resp, true)
		if err == nil {
			d.emit(Event{Type: EventReleased, Detail: fmt.Sprintf("%d lease(s) released on shutdown", len(resp.Released))})
		}
	}
	done := make(chan struct{})
	go func() { d.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// defaultHTTPClient is a daemon's client when its config gives none. It has
// its own transport, because a daemon has up to concurrency jobs' calls plus
// its claim and heartbeat open to one relay host at once, and the shared
// default keeps two idle connections a host: every other call would pay a
// new TCP and TLS handshake.
func defaultHTTPClient(concurrency int) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = concurrency + 2
	return &http.Client{
		Transport: transport,
		Timeout:   30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("a protocol call is never redirected")
		},
	}
}
