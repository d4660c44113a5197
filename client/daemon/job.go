package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Fetch and report timings, as the byollm daemon keeps them: the payload is
// awaited with backoff from 50 ms to 1 s, for at most the lease or 30 s,
// whichever ends first; waiting past the lease would race whoever holds the
// job next.
const (
	fetchFirstDelay = 50 * time.Millisecond
	fetchMaxDelay   = time.Second
	fetchMaxWaitMs  = 30_000
	// fetchAttemptsBeforeGone: a fetch that finds no job may be a slow seal
	// (the relay requeued the unsealed claim), so the job is refused only
	// after it happens this many times; before that the lease just lapses.
	fetchAttemptsBeforeGone = 3
	// gaveUpTTLMs is how long a give-up is remembered; past it the job
	// cannot be offered again anyway.
	gaveUpTTLMs = 10 * 60_000
	// callTimeout bounds one report or release, which run outside the job's
	// own context (a cancelled job still reports "canceled").
	callTimeout = 30 * time.Second
)

// handle is one claimed job, start to finish.
func (d *Daemon) handle(ctx context.Context, job protocol.ClaimedStub) {
	if reason := d.admit(job); reason != "" {
		d.refuse(job, reason)
		return
	}
	envelope, ok := d.fetchWhenSealed(ctx, job)
	if !ok {
		if errors.Is(context.Cause(ctx), errCancelledBySite) {
			// Cancelled before the work arrived: still answered, so the site
			// learns the cancel was honoured.
			info := d.backend.Info()
			d.report(job, protocol.CanceledOutcome(), protocol.RunMetadata{Model: info.Model, BackendClass: info.Class})
		}
		return
	}
	payload, err := d.openPayload(job, envelope)
	if err != nil {
		// A payload that does not verify as the pinned site's is not run:
		// running it would run whatever an intermediary supplied. The answer
		// will not change, so the job is refused rather than left to lapse
		// and be offered here again.
		d.refuse(job, err.Error())
		return
	}
	d.emit(Event{Type: EventOpened, JobID: job.ID, Site: job.Site, Detail: fmt.Sprintf("%d characters, verified as the site's", payload.TextLength())})

	outcome, ran := d.run(ctx, job, payload)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errLost), errors.Is(cause, errShutdown), errors.Is(cause, context.Canceled):
		// Not this device's job any more (lost), or about to be released
		// (shutdown): a result now would be refused, or would race the
		// release.
		return
	case errors.Is(cause, errSiteWithdrawn):
		// Nothing to seal to: the pin went with the consent. The lease goes
		// back so the relay is not left waiting out a grant nobody finishes.
		d.release(job, "revoked")
		return
	}
	d.report(job, outcome, ran)
}

// admit is the device's own decision, before any payload is fetched: a
// device that declines never receives the prompt. It
// returns "" to go ahead, or why not.
func (d *Daemon) admit(job protocol.ClaimedStub) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.pairing.Sites[job.Site]; !ok {
		return "this device does not serve site " + job.Site
	}
	var service string
	if d.pairing.ControlPlanePublic == "" {
		// Direct mode: nothing here can tell who anybody else is, so only
		// the owner's own work runs.
		if job.Owner != d.pairing.Owner {
			return "this device serves its owner only (no control-plane key was pinned at pairing)"
		}
	} else {
		if reason := d.checkGrant(job); reason != "" {
			return reason
		}
		service = job.Grant.Service
	}
	cap, ok := d.capabilityFor(job.Kind, service)
	if !ok {
		return "this device has no service for " + job.Kind
	}
	if job.Owner != d.pairing.Owner {
		if job.Audience == "private" {
			return "a private job of another person"
		}
		if cap.OfferScope == "private" {
			return "this device's service is offered to its owner only"
		}
	}
	return ""
}

// checkGrant verifies a relayed job's grant against the pinned
// control-plane key and the stub: the signature's
// word is the only word, and any disagreement with the stub is a refusal.
// Called with d.mu held.
func (d *Daemon) checkGrant(job protocol.ClaimedStub) string {
	g := job.Grant
	if g == nil {
		return "no grant arrived with the job, and this device only runs relayed work its control plane signed for"
	}
	now := d.now()
	if err := protocol.VerifyGrant(*g, protocol.GrantCheck{
		Owner: d.pairing.Owner, JobID: job.ID, ControlPlanePublic: d.pairing.ControlPlanePublic, Now: now,
	}); err != nil {
		return "the job's grant was refused: " + err.Error()
	}
	purpose := job.Purpose
	if purpose == "" {
		purpose = "default"
	}
	switch {
	case g.User != job.Owner:
		return "the grant names a different user than the job"
	case g.Site != job.Site:
		return "the grant names a different site than the job"
	case g.Kind != job.Kind:
		return "the grant names a different kind than the job"
	case g.Purpose != purpose:
		return "the grant names a different purpose than the job"
	}
	for id, until := range d.spentGrants {
		if until <= now {
			delete(d.spentGrants, id)
		}
	}
	if _, spent := d.spentGrants[g.GrantID]; spent {
		return "this grant has already been used; a grant admits one job, once"
	}
	// Kept until no clock this device accepts could call it fresh again.
	d.spentGrants[g.GrantID] = g.IssuedAt + protocol.GrantMaxAgeMs + protocol.ClockSkewWarnMs
	return ""
}

func (d *Daemon) capabilityFor(kind, service string) (protocol.Capability, bool) {
	for _, c := range d.capabilities {
		if c.Kind == kind && (service == "" || c.Service == service) {
			return c, true
		}
	}
	return protocol.Capability{}, false
}

// fetchWhenSealed collects the payload, waiting while the relay answers
// not-ready (the site has not sealed yet). false means the job is over for
// this device; every way out that is permanent releases it as refused, so
// the relay does not offer it here again.
func (d *Daemon) fetchWhenSealed(ctx context.Context, job protocol.ClaimedStub) (protocol.SealedEnvelope, bool) {
	deadline := min(job.Lease.ExpiresAt, d.now()+fetchMaxWaitMs)
	delay := fetchFirstDelay
	waited := false
	for {
		var resp protocol.FetchResponse
		err := d.post(ctx, "fetch", protocol.FetchRequest{
			ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID(), JobID: job.ID, LeaseID: job.Lease.ID,
		}, &resp, true)
		if err == nil {
			d.forgetGaveUp(job)
			return resp.Envelope, true
		}
		if ctx.Err() != nil {
			return protocol.SealedEnvelope{}, false
		}
		switch kindOf(err) {
		case KindNotReady:
			if d.now()+delay.Milliseconds() >= deadline {
				d.gone(job, "the payload never arrived")
				return protocol.SealedEnvelope{}, false
			}
			if !waited {
				waited = true
				d.emit(Event{Type: EventWaiting, JobID: job.ID, Site: job.Site})
			}
			if d.sleep(ctx, delay) != nil {
				return protocol.SealedEnvelope{}, false
			}
			delay = min(2*delay, fetchMaxDelay)
		case KindTooLate:
			// The relay answered, and the answer is that the job has ended:
			// no transient reading, so no second try.
			d.forgetGaveUp(job)
			d.refuse(job, "the job is over: "+err.Error())
			return protocol.SealedEnvelope{}, false
		case KindRejected:
			d.gone(job, err.Error())
			return protocol.SealedEnvelope{}, false
		default:
			// The network or the relay having a moment, or a lease that is no
			// longer current: the lease lapses and the relay offers the job
			// again, which is the recovery the protocol is built around.
			d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "fetch: " + err.Error()})
			return protocol.SealedEnvelope{}, false
		}
	}
}

func gaveUpKey(job protocol.ClaimedStub) string { return job.Site + "\x00" + job.ID }

// gaveUp is a job whose payload could not be fetched.
type gaveUp struct {
	attempts int
	at       int64
}

func (d *Daemon) forgetGaveUp(job protocol.ClaimedStub) {
	d.mu.Lock()
	delete(d.gaveUp, gaveUpKey(job))
	d.mu.Unlock()
}

// gone counts a fetch that found no payload; the third time, the job is
// refused.
func (d *Daemon) gone(job protocol.ClaimedStub, why string) {
	now := d.now()
	d.mu.Lock()
	// Pruned here, the only place that learns a give-up happened, so the
	// map cannot grow for the life of the process.
	for k, g := range d.gaveUp {
		if now-g.at > gaveUpTTLMs {
			delete(d.gaveUp, k)
		}
	}
	key := gaveUpKey(job)
	attempts := d.gaveUp[key].attempts + 1
	d.gaveUp[key] = gaveUp{attempts: attempts, at: now}
	if attempts >= fetchAttemptsBeforeGone {
		delete(d.gaveUp, key)
	}
	d.mu.Unlock()
	if attempts < fetchAttemptsBeforeGone {
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site,
			Detail: fmt.Sprintf("could not fetch the payload (%s), attempt %d of %d; letting the lease lapse", why, attempts, fetchAttemptsBeforeGone)})
		return
	}
	d.refuse(job, "could not fetch the payload "+fmt.Sprint(attempts)+" times: "+why)
}

// openPayload opens work sealed to this device and checks it came from
// the pinned site the stub names (SITE_KEY_BY_STUB); no other pin is tried.
func (d *Daemon) openPayload(job protocol.ClaimedStub, envelope protocol.SealedEnvelope) (protocol.JobPayload, error) {
	pin, ok := d.pinFor(job.Site)
	if !ok {
		return protocol.JobPayload{}, fmt.Errorf("this device does not serve site %s", job.Site)
	}
	// Checked apart from the signature so the refusal names the routing,
	// not the crypto, when the two disagree.
	if envelope.SenderKeyID != job.Site {
		return protocol.JobPayload{}, fmt.Errorf("the stub names site %s, but the payload says it was sealed by %s", job.Site, envelope.SenderKeyID)
	}
	plaintext, err := protocol.Open(envelope, d.keys, pin.Identity, protocol.ExpectedEnvelope{
		JobID: job.ID, SenderKeyID: job.Site, RecipientKeyID: d.keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return protocol.JobPayload{}, fmt.Errorf("the payload did not verify as coming from site %s (%w)", job.Site, err)
	}
	return protocol.DecodeJobPayload(plaintext, job.Kind)
}

func (d *Daemon) pinFor(siteKeyID string) (protocol.PublicIdentity, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pin, ok := d.pairing.Sites[siteKeyID]
	return pin, ok
}

// run asks the backend, bounded by the job's deadline.
func (d *Daemon) run(ctx context.Context, job protocol.ClaimedStub, payload protocol.JobPayload) (protocol.Outcome, protocol.RunMetadata) {
	d.emit(Event{Type: EventRunning, JobID: job.ID, Site: job.Site})
	info := d.backend.Info()
	started := d.clock.Now()
	runCtx, cancel := context.WithTimeout(ctx, time.Duration(job.DeadlineAt-d.now())*time.Millisecond)
	answer, err := d.answer(runCtx, job, ComposePrompt(job.Kind, payload))
	cancel()
	ran := protocol.RunMetadata{Model: info.Model, BackendClass: info.Class, DurationMs: max(0, d.clock.Now().Sub(started).Milliseconds())}
	switch {
	case err == nil:
		stop, reported := answer.Stop, answer.Stop != ""
		if stop == "" {
			stop = "unknown"
		}
		ran.Stop, ran.StopReported = stop, &reported
		return protocol.OKOutcome(answer.Text), ran
	case errors.Is(context.Cause(ctx), errCancelledBySite):
		return protocol.CanceledOutcome(), ran
	default:
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "backend: " + err.Error()})
		return outcomeForSite(err), ran
	}
}

// report seals the outcome to the site the stub names and submits it with
// its disposition. It runs outside the job's context: a job the site
// cancelled still reports "canceled".
func (d *Daemon) report(job protocol.ClaimedStub, outcome protocol.Outcome, ran protocol.RunMetadata) {
	pin, ok := d.pinFor(job.Site)
	if !ok {
		d.release(job, "revoked")
		return
	}
	plaintext, err := protocol.SealedOutcome{Outcome: outcome, Ran: ran}.Plaintext()
	if err != nil {
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "sealing the outcome: " + err.Error()})
		return
	}
	envelope, err := protocol.Seal(plaintext, d.keys, pin.Encryption, protocol.EnvelopeContext{
		JobID: job.ID, SenderKeyID: d.keys.KeyID(), RecipientKeyID: job.Site,
		DeadlineAt: d.now() + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionResult,
	})
	if err != nil {
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "sealing the outcome: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(d.life, callTimeout)
	defer cancel()
	req := protocol.ResultRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID(), JobID: job.ID, LeaseID: job.Lease.ID,
		Envelope: envelope, Disposition: outcome.Outcome,
	}
	// A result is idempotent per lease (a replay is answered duplicate), so
	// a transient failure is simply sent again.
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var resp protocol.ResultResponse
		err = d.post(ctx, "result", req, &resp, true)
		if err == nil {
			detail := outcome.Outcome
			if !resp.Accepted {
				detail += " (already recorded)"
			}
			d.emit(Event{Type: EventReported, JobID: job.ID, Site: job.Site, Detail: detail})
			return
		}
		var ce *CallError
		if !errors.As(err, &ce) || !ce.Retryable() || attempt >= 3 || d.sleep(ctx, max(wait, ce.RetryAfter)) != nil {
			break
		}
		wait *= 2
	}
	d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "result: " + d.checkRevoked(err).Error()})
}

// refuse declines a job permanently: released as "refused", so the relay
// never offers it to this device again.
func (d *Daemon) refuse(job protocol.ClaimedStub, reason string) {
	d.emit(Event{Type: EventRefused, JobID: job.ID, Site: job.Site, Detail: reason})
	d.release(job, "refused")
}

func (d *Daemon) release(job protocol.ClaimedStub, reason string) {
	ctx, cancel := context.WithTimeout(d.life, callTimeout)
	defer cancel()
	var resp protocol.ReleaseResponse
	err := d.post(ctx, "release", protocol.ReleaseRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID(),
		Leases: []protocol.GrantRef{{JobID: job.ID, LeaseID: job.Lease.ID}}, Reason: reason,
	}, &resp, true)
	if err != nil {
		d.emit(Event{Type: EventError, JobID: job.ID, Site: job.Site, Detail: "release: " + d.checkRevoked(err).Error()})
		return
	}
	d.emit(Event{Type: EventReleased, JobID: job.ID, Site: job.Site, Detail: reason})
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
