// Package site is a site's SDK for a BYOLLM relay: the Go counterpart of
// @byollm/server's cloud lane: publish stubs, reseal payloads, collect
// results.
//
// A site publishes job stubs, and nothing else, to the relay. It keeps each
// job's payload sealed at rest to its own key. Pumping has two halves, run
// concurrently by Pump and on independent loops by Run, so a slow half
// never starves the other: PumpSeals asks the relay which devices claimed
// which jobs, checks each device's identity, re-seals the payload to that
// device and hands it over; PumpResults collects finished results, opens
// each one, verifies it against a device the payload was sealed to, checks
// the clear-text disposition against the sealed outcome, and learns of
// evictions. Everything is outbound polling: the relay never calls a site.
//
// Every published job ends here in exactly one Fate (verified, failed,
// cancelled, expired, evicted), reported once in Report.Ended. Against
// byorelay the results half also tells the relay which fates it has taken
// (protocol.CollectRequest), so a poll costs what is new rather than
// everything finished; against a reference relay the same request is
// answered with the plain results list and only evictions go unreported
// (such a job ends as expired at its deadline).
//
// The relay is trusted with routing only. Nothing it says about who ran a
// job is believed until a signature it cannot forge says the same.
package site

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
)

// Clock is the site's time source: request timestamps, deadlines and the
// at-rest envelope's deadline. It is the store's clock type, so one test
// clock drives a site, a daemon and a relay alike: anything with a Now
// method.
type Clock = clock.Clock

// Config wires a Client. RelayURL, SiteID and Keys are required.
type Config struct {
	// RelayURL is the relay's origin, e.g. "http://127.0.0.1:3000".
	RelayURL string
	// StreamAttachURL is where Stream attaches (the relay stack's
	// StreamAttachUrl output: its attach function's URL when no edge fronts
	// it, docs/streaming.md); "" means RelayURL + /byorelay/stream/attach.
	StreamAttachURL string
	// SiteID is this site's id at the relay (the control plane's name, not
	// the key id).
	SiteID string
	// Keys are the site's identity and encryption keys.
	Keys *protocol.Keys
	// HTTPClient defaults to one with a 30 s timeout that never follows a
	// redirect (a protocol call is never redirected).
	HTTPClient *http.Client
	// Clock defaults to the host clock.
	Clock Clock
	// MaxAttempts bounds tries of one call on a retryable answer; 0 means 3.
	MaxAttempts int
	// RetryBackoff is the first wait between tries, doubled each time;
	// 0 means 250 ms.
	RetryBackoff time.Duration
	// Sleep waits between tries; nil waits on a timer. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Ledger keeps the published jobs; nil keeps them in process memory.
	Ledger Ledger
	// OnStreamFault hears every checkpoint write that failed and every
	// stream that ended early for a fault, with its kind and reason
	// (StreamFault); nil logs each at warning level on slog.Default(), so
	// none vanishes. It is called from the reading goroutine and from the
	// checkpoint writer, possibly at once, and must not block.
	OnStreamFault func(StreamFault)
}

// Client is one site's connection to a relay. Safe for concurrent use.
type Client struct {
	relayURL  string
	attachURL string
	siteID    string
	keys      *protocol.Keys
	http      *http.Client
	clock     Clock
	attempts  int
	backoff   time.Duration
	sleep     func(ctx context.Context, d time.Duration) error

	ledger  Ledger
	onFault func(StreamFault)

	mu sync.Mutex
	// collect are ids whose fate this site has taken from a results list,
	// to be named in the next collect so the relay stops listing them.
	// Memory only: after a restart the relay lists them again, and a job
	// the ledger says has ended is then only collected.
	collect map[string]bool
	// polledAt is when the latest results poll the relay answered was sent
	// (this site's clock), set once its answer was judged: every result
	// the relay accepted before a deadline that is not later than this has
	// been seen (expiryBefore).
	polledAt int64
	// outbox are endings not yet handed to a report.
	outbox []Ending
}

// New checks the configuration and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.RelayURL == "" || cfg.SiteID == "" || cfg.Keys == nil {
		return nil, errors.New("site: RelayURL, SiteID and Keys are required")
	}
	c := &Client{
		relayURL:  strings.TrimRight(cfg.RelayURL, "/"),
		attachURL: cfg.StreamAttachURL,
		siteID:    cfg.SiteID,
		keys:      cfg.Keys,
		http:      cfg.HTTPClient,
		clock:     cfg.Clock,
		attempts:  cfg.MaxAttempts,
		backoff:   cfg.RetryBackoff,
		sleep:     cfg.Sleep,
		ledger:    cfg.Ledger,
		onFault:   cfg.OnStreamFault,
		collect:   map[string]bool{},
	}
	if c.ledger == nil {
		c.ledger = newMemoryLedger()
	}
	if c.http == nil {
		c.http = &http.Client{
			Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("a protocol call is never redirected")
			},
		}
	}
	if c.clock == nil {
		c.clock = clock.System{}
	}
	if c.attempts <= 0 {
		c.attempts = 3
	}
	if c.backoff <= 0 {
		c.backoff = 250 * time.Millisecond
	}
	if c.sleep == nil {
		c.sleep = clock.Sleep
	}
	return c, nil
}

// fault tells the hook, or the default logger, of f.
func (c *Client) fault(f StreamFault) {
	if c.onFault != nil {
		c.onFault(f)
		return
	}
	attrs := []slog.Attr{slog.String("kind", string(f.Kind)), slog.String("job", f.JobID),
		slog.String("lease", f.LeaseID), slog.String("reason", f.Reason)}
	if f.Err != nil {
		attrs = append(attrs, slog.String("error", f.Err.Error()))
	}
	slog.Default().LogAttrs(context.Background(), slog.LevelWarn, "site: stream fault", attrs...)
}

// KeyID is this site's key id: what its stubs name as `site`.
func (c *Client) KeyID() string { return c.keys.KeyID() }

func (c *Client) now() int64 { return c.clock.Now().UnixMilli() }

// Publish routes one job. The stub is what the relay sees, and all it
// sees; the payload stays here, sealed at rest, until a device claims the
// job. Site defaults to this site's key id, SizeClass to the class of the
// payload's length, Audience to "team"; DeadlineAt is required (the relay
// drops the job at that moment).
//
// Publishing the same job again is safe (the relay answers with the job's
// current state and never resets it), which is what to do after a
// retryable error.
func (c *Client) Publish(ctx context.Context, stub protocol.JobStub, payload Payload) (state string, err error) {
	stub, err = c.completeStub(stub, payload)
	if err != nil {
		return "", err
	}
	plaintext, err := payload.Plaintext()
	if err != nil {
		return "", err
	}
	createdAt := c.now()
	self := c.keys.KeyID()
	atRest, err := protocol.Seal(plaintext, c.keys, c.keys.Public().Encryption, protocol.EnvelopeContext{
		JobID: stub.ID, SenderKeyID: self, RecipientKeyID: self,
		DeadlineAt: createdAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return "", fmt.Errorf("seal at rest: %w", err)
	}

	// Tracked before the relay hears of it, so a Pump running alongside
	// can seal for a device that claims it the instant it is queued, and a
	// durable ledger publishes it again after a restart.
	if err := c.ledger.Track(ctx, Tracked{Stub: stub, AtRest: atRest, CreatedAt: createdAt}); err != nil {
		return "", err
	}
	c.mu.Lock()
	delete(c.collect, stub.ID)
	c.mu.Unlock()
	return c.announce(ctx, stub)
}

// announce posts a tracked stub and records that the relay accepted it.
func (c *Client) announce(ctx context.Context, stub protocol.JobStub) (string, error) {
	var resp protocol.JobStateResponse
	err := c.post(ctx, "enqueue", protocol.EnqueueRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, Stub: stub,
	}, &resp)
	if err != nil {
		var refused *EnqueueRefused
		if errors.As(err, &refused) {
			// Not queued, and waiting will not queue it: forget it, so a
			// corrected stub can be published under the same id.
			if uerr := c.ledger.Untrack(ctx, stub.ID, refused.Error()); uerr != nil {
				return "", ledgerErr(uerr)
			}
		}
		return "", err
	}
	if err := c.ledger.Published(ctx, stub.ID); err != nil {
		return "", ledgerErr(err)
	}
	return resp.State, nil
}

// Republish posts again every tracked stub the relay has not accepted
// (a Publish that failed retryably, or a durable ledger's jobs from before
// a restart); the relay's enqueue is idempotent per job. PumpSeals calls
// it every cycle. It returns the ids published and the ones the relay
// refused (untracked, as Publish does).
func (c *Client) Republish(ctx context.Context) (published []string, refused []Refusal, err error) {
	jobs, err := c.ledger.Unpublished(ctx)
	if err != nil {
		return nil, nil, ledgerErr(err)
	}
	for _, t := range jobs {
		_, err := c.announce(ctx, t.Stub)
		var er *EnqueueRefused
		if errors.As(err, &er) {
			refused = append(refused, Refusal{JobID: t.Stub.ID, Reason: er.Error()})
			continue
		}
		var re *RelayError
		if errors.As(err, &re) && re.Status == http.StatusBadRequest {
			// This stub, not this site: one job the relay will never take
			// must not stop the pump for every other.
			if uerr := c.ledger.Untrack(ctx, t.Stub.ID, re.Error()); uerr != nil {
				return published, refused, ledgerErr(uerr)
			}
			refused = append(refused, Refusal{JobID: t.Stub.ID, Reason: re.Error()})
			continue
		}
		if err != nil {
			return published, refused, err
		}
		published = append(published, t.Stub.ID)
	}
	return published, refused, nil
}

func (c *Client) completeStub(stub protocol.JobStub, payload Payload) (protocol.JobStub, error) {
	if stub.ID == "" || stub.Owner == "" {
		return stub, errors.New("site: a stub needs an id and an owner")
	}
	if err := payload.CheckKind(stub.Kind); err != nil {
		return stub, err
	}
	if stub.Site == "" {
		stub.Site = c.keys.KeyID()
	}
	if stub.Site != c.keys.KeyID() {
		// The device opens the payload with the key the stub names; a stub
		// naming another site's key is work nobody can verify.
		return stub, fmt.Errorf("site: stub names site %s, but this site's key is %s", stub.Site, c.keys.KeyID())
	}
	if stub.Audience == "" {
		stub.Audience = "team"
	}
	if stub.SizeClass == "" {
		stub.SizeClass = SizeClassOf(payload.TextLength())
	}
	if stub.DeadlineAt <= c.now() {
		return stub, errors.New("site: the stub's deadlineAt must be in the future")
	}
	// Streaming is kept as the caller set it: such a job is offered only
	// to devices that opted in to live streams (docs/streaming.md), and
	// read with Stream.
	return stub, nil
}

// Cancel withdraws a job. Locally it stops any further seal at once; at
// the relay it stops the job being offered and tells the holding device at
// its next heartbeat, which then reports a "canceled" outcome. cancelled is
// the relay's answer (false for a job it does not know). Once the relay has
// answered, the job ends here as FateCancelled (unless it had already
// ended), reported in the next Report; a result arriving after that is not
// delivered. After an error it has not ended: call Cancel again.
func (c *Client) Cancel(ctx context.Context, jobID string) (cancelled bool, err error) {
	if err := c.ledger.Cancelling(ctx, jobID); err != nil {
		return false, ledgerErr(err)
	}
	var resp protocol.CancelResponse
	if err := c.post(ctx, "cancel", protocol.CancelRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, JobID: jobID,
	}, &resp); err != nil {
		return false, err
	}
	if err := c.end(ctx, Ending{JobID: jobID, Fate: FateCancelled, Reason: "cancelled by this site"}); err != nil {
		return false, err
	}
	return resp.Cancelled, nil
}
