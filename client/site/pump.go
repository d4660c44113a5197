package site

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Fate is how a published job ended at this site. Every job Publish queued
// ends in exactly one fate, reported once, in Report.Ended: a site never
// has to wonder whether a job it is still waiting for is coming.
type Fate string

const (
	// FateVerified: a result opened, verified against the device the
	// payload was sealed to and checked against its disposition
	// (Ending.Result; also in Report.Results). Its outcome may still be an
	// error the device reported.
	FateVerified Fate = "verified"
	// FateFailed: the relay holds a result this site cannot accept (a
	// device it never sealed to, a signature that does not open, a
	// disposition that contradicts the sealed outcome). The job is done at
	// the relay; nothing more will come.
	FateFailed Fate = "failed"
	// FateCancelled: this site cancelled it (Cancel).
	FateCancelled Fate = "cancelled"
	// FateExpired: its deadline passed here with no result.
	FateExpired Fate = "expired"
	// FateEvicted: the relay dropped it after its third claim went unsealed
	// (the site was too slow to seal, or refused to). Publishing it again
	// starts a new job.
	FateEvicted Fate = "evicted"
)

// Ending is how one job ended.
type Ending struct {
	JobID string
	Fate  Fate
	// Reason says why, for every fate but FateVerified.
	Reason string
	// Result is set for FateVerified.
	Result *Result
}

// Report is what one Pump (or one half of it) did.
type Report struct {
	// Sealed are the jobs whose payload was handed to a claiming device.
	Sealed []string
	// Results are the results delivered this cycle, each verified and each
	// delivered once for the life of the job: the FateVerified endings'
	// results, for a caller that wants only those.
	Results []Result
	// Ended are the jobs that ended since the last report, whatever their
	// fate, each reported exactly once.
	Ended []Ending
	// Refused are jobs this site would not seal for, and results it would
	// not accept. Never silent: each is a device waiting on a payload that
	// will not come, or an answer somebody else signed.
	Refused []Refusal
	// Late are the jobs whose payload the relay refused as too late: the
	// claim's awaiting window lapsed before the seal arrived. Each is also
	// in Refused; the relay offers the job again (to the same device,
	// up to its eviction rule), so a late seal is a delay, not an end.
	Late []string
	// Deferred is set when the relay said "ask later" (5xx, 429,
	// not-ready) and the cycle ended early, keeping what it had done. A site
	// that did nothing and a site that was told to wait must not look the
	// same in a log.
	Deferred string
}

// Refusal names a job and why it was refused.
type Refusal struct {
	JobID  string
	Reason string
}

// Result is a verified result, as the app receives it.
type Result struct {
	JobID   string
	Outcome Outcome
	Ran     RunMetadata
	// Who ran it: the runner and owner the relay recorded, and the device
	// key whose signature the result carries (which is the key the payload
	// was sealed to under LeaseID).
	RunnerID    string
	RunnerOwner string
	LeaseID     string
	Device      protocol.PublicIdentity
	DeviceKeyID string
	// Audience is the job's; Untrusted is audience != "private" (the work
	// may have run on someone else's machine), derived here and never taken
	// from the device.
	Audience  string
	Untrusted bool
}

// Pump is one cycle of both halves, run concurrently: seal for every job a
// device claimed, and collect every finished job's fate. Safe to call as
// often as wanted and from several goroutines; the caller picks the
// cadence. Run pumps the halves on independent loops instead, so a slow
// half never delays the other.
//
// An error means the relay refused this site (signature, registration,
// version), which will not fix itself; a retryable refusal ends the cycle
// with Report.Deferred instead.
func (c *Client) Pump(ctx context.Context) (Report, error) {
	var seal, collect Report
	var sealErr, collectErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); seal, sealErr = c.PumpSeals(ctx) }()
	go func() { defer wg.Done(); collect, collectErr = c.PumpResults(ctx) }()
	wg.Wait()
	rep := Report{
		Sealed:   seal.Sealed,
		Results:  append(seal.Results, collect.Results...),
		Ended:    append(seal.Ended, collect.Ended...),
		Refused:  append(seal.Refused, collect.Refused...),
		Late:     seal.Late,
		Deferred: strings.Trim(seal.Deferred+"; "+collect.Deferred, "; "),
	}
	return rep, errors.Join(sealErr, collectErr)
}

// PumpSeals is Pump's first half: seal for every job a device claimed.
func (c *Client) PumpSeals(ctx context.Context) (Report, error) {
	var rep Report
	_, refused, err := c.Republish(ctx)
	rep.Refused = append(rep.Refused, refused...)
	if err == nil {
		err = c.sealPending(ctx, &rep)
	}
	return c.report(rep, err)
}

// PumpResults is Pump's second half: collect results and evictions, end
// jobs past their deadline, and report every ending.
func (c *Client) PumpResults(ctx context.Context) (Report, error) {
	var rep Report
	err := c.collectResults(ctx, &rep)
	return c.finish(ctx, rep, err)
}

// finish ends what is over (expiryBefore), then reports. Only the results
// half expires: the instant moves when a results poll is answered, and a
// ledger on a store may read a whole index to expire (a site table's due
// partitions), which both halves of every cycle would read twice.
func (c *Client) finish(ctx context.Context, rep Report, err error) (Report, error) {
	expired, eerr := c.ledger.Expire(ctx, c.expiryBefore())
	err = errors.Join(err, ledgerErr(eerr))
	c.mu.Lock()
	c.outbox = append(c.outbox, expired...)
	c.mu.Unlock()
	return c.report(rep, err)
}

// report hands over every ending not yet reported, and turns a retryable
// error into Deferred.
func (c *Client) report(rep Report, err error) (Report, error) {
	c.mu.Lock()
	rep.Ended = append(rep.Ended, c.outbox...)
	c.outbox = nil
	c.mu.Unlock()
	for _, e := range rep.Ended {
		if e.Result != nil {
			rep.Results = append(rep.Results, *e.Result)
		}
	}
	if err != nil && IsRetryable(err) {
		rep.Deferred = err.Error()
		return rep, nil
	}
	return rep, err
}

// expiryBefore is the instant up to which a job's deadline means it has
// expired here. Not the clock: the relay takes a result until the
// deadline, and one it took in the last instant, after this site's latest
// poll, would be called expired by a site that ended jobs at their
// deadline. So a job expires once a results poll sent
// protocol.ExpiryMarginMs or more after its deadline (the relay's clock is
// not this site's) was answered without it (a byorelay relay lists such a
// result protocol.ResultGraceMs past the deadline), or, if no poll gets an
// answer, once that grace has passed by this site's clock, after which no
// relay lists it.
func (c *Client) expiryBefore() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.polledAt-protocol.ExpiryMarginMs, c.now()-protocol.ResultGraceMs)
}

// Run pumps both halves until ctx ends, each on its own loop, every
// interval, handing each report that did anything to deliver (called from
// both loops, one at a time). A half whose relay says "later" waits for its
// next turn. Returns ctx's error, or the first refusal that will not fix
// itself (after stopping both loops).
func (c *Client) Run(ctx context.Context, every time.Duration, deliver func(Report)) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var deliverMu sync.Mutex
	errs := make(chan error, 2)
	loop := func(half func(context.Context) (Report, error)) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			rep, err := half(ctx)
			if err != nil && ctx.Err() == nil {
				errs <- err
				stop()
				return
			}
			if rep.busy() {
				deliverMu.Lock()
				deliver(rep)
				deliverMu.Unlock()
			}
			select {
			case <-ctx.Done():
				errs <- nil
				return
			case <-t.C:
			}
		}
	}
	go loop(c.PumpSeals)
	go loop(c.PumpResults)
	first, second := <-errs, <-errs
	if err := errors.Join(first, second); err != nil {
		return err
	}
	return ctx.Err()
}

// busy reports whether a report has anything in it.
func (r Report) busy() bool {
	return len(r.Sealed) > 0 || len(r.Ended) > 0 || len(r.Refused) > 0 || r.Deferred != ""
}

func (c *Client) sealPending(ctx context.Context, rep *Report) error {
	var pending protocol.SitePendingResponse
	if err := c.get(ctx, "pending", &pending); err != nil {
		return err
	}
	for _, claim := range pending.Jobs {
		if claim.Device == nil || claim.LeaseID == "" {
			continue
		}
		envelope, refusal, err := c.resealFor(ctx, claim)
		if err != nil {
			return err
		}
		if refusal != "" {
			rep.Refused = append(rep.Refused, Refusal{JobID: claim.JobID, Reason: refusal})
			continue
		}
		if envelope == nil {
			continue // not a job this site published
		}
		var resp protocol.JobStateResponse
		err = c.post(ctx, "payload", protocol.PayloadRequest{
			ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, JobID: claim.JobID, Envelope: *envelope,
		}, &resp)
		var re *RelayError
		if errors.As(err, &re) && !re.Retryable() && (re.Code == protocol.CodeTooLate || re.Code == protocol.CodeNotFound) {
			// The job moved on between the read and the write (the
			// awaiting window lapsed, or it was swept): about this job,
			// not about this site, so the cycle goes on.
			rep.Refused = append(rep.Refused, Refusal{JobID: claim.JobID, Reason: "relay: " + re.Message})
			if re.Code == protocol.CodeTooLate {
				rep.Late = append(rep.Late, claim.JobID)
			}
			continue
		}
		if err != nil {
			return err
		}
		rep.Sealed = append(rep.Sealed, claim.JobID)
	}
	return nil
}

// resealFor opens the job's at-rest payload and seals it to the claiming
// device, recording the device in the ledger first. A nil envelope and no
// refusal means the job is not this site's to answer for (published by
// another process, or already forgotten).
func (c *Client) resealFor(ctx context.Context, claim protocol.SitePendingJob) (*protocol.SealedEnvelope, string, error) {
	j, ok, err := c.ledger.Lookup(ctx, claim.JobID)
	if err != nil {
		return nil, "", ledgerErr(err)
	}
	if !ok {
		return nil, "", nil
	}
	if refusal := sealRefusal(j); refusal != "" {
		return nil, refusal, nil
	}
	device := *claim.Device
	// The relay's word for which key the device holds is checked before
	// anything is sealed to it: an encryption key not signed by the identity
	// presenting it would let whoever holds it read the payload.
	if !protocol.VerifyPublicIdentity(device) {
		return nil, "the claiming device's encryption key is not signed by its identity", nil
	}
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return nil, "the claiming device's identity is not a key", nil
	}
	self := c.keys.KeyID()
	plaintext, err := protocol.Open(j.AtRest, c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: j.Stub.ID, SenderKeyID: self, RecipientKeyID: self, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return nil, "this site cannot open its own at-rest payload: " + err.Error(), nil
	}
	envelope, err := protocol.Seal(plaintext, c.keys, device.Encryption, protocol.EnvelopeContext{
		JobID: j.Stub.ID, SenderKeyID: self, RecipientKeyID: deviceKeyID,
		// From the record, never a fresh clock read: the at-rest envelope's
		// deadline is what a reseal binds (createdAt + the max age).
		DeadlineAt: j.CreatedAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return nil, "sealing to the device failed: " + err.Error(), nil
	}
	// Recorded before the envelope leaves (write-ahead): a site that dies
	// after posting must still accept this device's result when it comes
	// back. A lease the relay granted after an earlier one lapsed is
	// adopted too (the reference site refuses it, which leaves a job whose
	// first device died unfinishable): the relay owns leases, and the
	// result is still accepted only from a device this job was sealed to.
	refusal, err := c.ledger.Sealing(ctx, claim)
	if err != nil {
		return nil, "", ledgerErr(err)
	}
	if refusal != "" {
		return nil, refusal, nil
	}
	return &envelope, "", nil
}

func (c *Client) collectResults(ctx context.Context, rep *Report) error {
	c.mu.Lock()
	taken := make([]string, 0, min(len(c.collect), protocol.MaxCollect))
	for id := range c.collect {
		if len(taken) == protocol.MaxCollect {
			break
		}
		taken = append(taken, id)
	}
	c.mu.Unlock()

	// A POST with the ids already taken: byorelay forgets them and adds the
	// eviction notices; a reference relay answers its plain list.
	sentAt := c.now()
	var finished protocol.CollectResponse
	if err := c.postResults(ctx, protocol.CollectRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, Collected: taken,
	}, &finished); err != nil {
		return err
	}
	c.mu.Lock()
	for _, id := range taken {
		delete(c.collect, id)
	}
	c.mu.Unlock()

	for _, done := range finished.Jobs {
		refusal, err := c.accept(ctx, done)
		if err != nil {
			return err
		}
		if refusal != "" {
			rep.Refused = append(rep.Refused, Refusal{JobID: done.JobID, Reason: refusal})
		}
	}
	for _, id := range finished.Evicted {
		_, ok, err := c.ledger.Lookup(ctx, id)
		if err != nil {
			return ledgerErr(err)
		}
		if !ok {
			// Another process of this site published it: its notice is
			// that process's to take.
			continue
		}
		c.mu.Lock()
		c.collect[id] = true
		c.mu.Unlock()
		if err := c.end(ctx, Ending{JobID: id, Fate: FateEvicted,
			Reason: "the relay evicted it: its claim lapsed unsealed " + strconv.Itoa(evictionAfter) + " times"}); err != nil {
			return err
		}
	}
	// Only now, with every listed job ended: the other half's finish must
	// not expire a job whose result is in this answer and not yet judged.
	c.mu.Lock()
	c.polledAt = max(c.polledAt, sentAt)
	c.mu.Unlock()
	return nil
}

// evictionAfter is the relay's rule (store.SealAttemptsBeforeEviction),
// repeated here for the message only: the SDK imports the protocol alone.
const evictionAfter = 3

// accept judges one finished job and ends it. A refusal is returned for the
// Report as well as recorded as the job's failure; nothing happens for a job
// that already ended here (its result is only collected) or that is not
// this site's.
func (c *Client) accept(ctx context.Context, done protocol.SiteResult) (string, error) {
	j, ok, err := c.ledger.Lookup(ctx, done.JobID)
	if err != nil {
		return "", ledgerErr(err)
	}
	if !ok {
		return "", nil
	}
	c.mu.Lock()
	c.collect[done.JobID] = true
	c.mu.Unlock()
	if j.Ended != "" {
		return "", nil
	}
	if len(j.SealedTo) == 0 && j.Cancelled {
		// A device that was told of the cancel before this site sealed
		// anything reports "canceled" for work it never saw. Nothing to
		// verify it against, and nothing the app does not already know.
		return "", c.end(ctx, Ending{JobID: j.Stub.ID, Fate: FateCancelled, Reason: "cancelled before any device was sent the payload"})
	}
	res, err := c.open(j, done)
	if err != nil {
		if eerr := c.end(ctx, Ending{JobID: j.Stub.ID, Fate: FateFailed, Reason: err.Error()}); eerr != nil {
			return "", eerr
		}
		return err.Error(), nil
	}
	return "", c.end(ctx, Ending{JobID: j.Stub.ID, Fate: FateVerified, Result: res})
}

// end records a job's one ending in the ledger and, if this was it, queues
// it for the next report; a job that already ended keeps its first fate.
func (c *Client) end(ctx context.Context, e Ending) error {
	first, err := c.ledger.End(ctx, e)
	if err != nil {
		return ledgerErr(err)
	}
	if first {
		c.mu.Lock()
		c.outbox = append(c.outbox, e)
		c.mu.Unlock()
	}
	return nil
}

func (c *Client) open(j Tracked, done protocol.SiteResult) (*Result, error) {
	if done.Envelope == nil || done.Device == nil || done.LeaseID == "" {
		return nil, errors.New("the relay listed a result with no envelope, device or lease")
	}
	// Accepted from a device this site sealed this job to, under whatever
	// lease the relay recorded, and from nobody else. The payload post names
	// no lease: when the awaiting window lapses between the site's pending
	// read and its post and the same device claims again (the sticky
	// re-offer), the seal lands on the new lease, and the device's result
	// comes back under a lease this site never saw. It is still that
	// device's work on this site's payload, and the device's signature,
	// checked below, is what proves it; refusing it left the job done at
	// the relay and never delivered. A device never sealed to gets nothing
	// it could answer.
	if !j.sealedToDevice(*done.Device) {
		if len(j.SealedTo) == 0 {
			return nil, errors.New("a result for a job this site never sealed to any device")
		}
		return nil, errors.New("the relay names a different device than the one this site sealed the work to")
	}
	deviceKeyID, err := protocol.KeyID(done.Device.Identity)
	if err != nil {
		return nil, errors.New("the device's identity is not a key")
	}
	plaintext, err := protocol.Open(*done.Envelope, c.keys, done.Device.Identity, protocol.ExpectedEnvelope{
		JobID: j.Stub.ID, SenderKeyID: deviceKeyID, RecipientKeyID: c.keys.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil {
		return nil, fmt.Errorf("the result does not open as the device's: %w", err)
	}
	sealed, err := DecodeSealedOutcome(plaintext, done.Disposition)
	if err != nil {
		return nil, err
	}
	return &Result{
		JobID: j.Stub.ID, Outcome: sealed.Outcome, Ran: sealed.Ran,
		RunnerID: done.RunnerID, RunnerOwner: done.RunnerOwner, LeaseID: done.LeaseID,
		Device: *done.Device, DeviceKeyID: deviceKeyID,
		Audience: j.Stub.Audience, Untrusted: j.Stub.Audience != "private",
	}, nil
}

// Pending is how many published jobs have not ended yet, as the default
// in-memory ledger counts them; with another ledger, ask its store.
func (c *Client) Pending() int {
	if m, ok := c.ledger.(*memoryLedger); ok {
		return m.pending()
	}
	return 0
}

// ledgerErr marks a ledger failure (a durable ledger's store was
// unreachable) as worth trying again: the cycle ends Deferred, and Run
// keeps going.
func ledgerErr(err error) error {
	if err == nil {
		return nil
	}
	return &LedgerError{Err: err}
}

// LedgerError is a Ledger that failed (its store did not answer). It is
// retryable: nothing was decided.
type LedgerError struct{ Err error }

func (e *LedgerError) Error() string { return "site ledger: " + e.Err.Error() }
func (e *LedgerError) Unwrap() error { return e.Err }
