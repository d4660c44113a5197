package site

import (
	"context"
	"errors"
	"fmt"

	"github.com/byorelay/byorelay/protocol"
)

// Report is what one Pump did.
type Report struct {
	// Sealed are the jobs whose payload was handed to a claiming device.
	Sealed []string
	// Results are the results delivered this cycle, each verified and each
	// delivered once for the life of the job.
	Results []Result
	// Refused are jobs this site would not seal for, and results it would
	// not accept. Never silent: each is a device waiting on a payload that
	// will not come, or an answer somebody else signed.
	Refused []Refusal
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

// Pump is one cycle: seal for every job a device claimed, then collect
// every finished result. Safe to call as often as wanted and from several
// goroutines; the caller picks the cadence.
//
// An error means the relay refused this site (signature, registration,
// version), which will not fix itself; a retryable refusal ends the cycle
// with Report.Deferred instead.
func (c *Client) Pump(ctx context.Context) (Report, error) {
	var rep Report
	err := c.sealPending(ctx, &rep)
	if err == nil {
		err = c.collectResults(ctx, &rep)
	}
	c.forgetPastDeadline()
	if err != nil && IsRetryable(err) {
		rep.Deferred = err.Error()
		return rep, nil
	}
	return rep, err
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
		envelope, refusal := c.resealFor(claim)
		if refusal != "" {
			rep.Refused = append(rep.Refused, Refusal{JobID: claim.JobID, Reason: refusal})
			continue
		}
		if envelope == nil {
			continue // not a job this site published
		}
		var resp protocol.JobStateResponse
		err := c.post(ctx, "payload", protocol.PayloadRequest{
			ProtocolVersion: protocol.ProtocolVersion, SiteID: c.siteID, JobID: claim.JobID, Envelope: *envelope,
		}, &resp)
		var re *RelayError
		if errors.As(err, &re) && !re.Retryable() && (re.Code == protocol.CodeTooLate || re.Code == protocol.CodeNotFound) {
			// The job moved on between the read and the write (the
			// awaiting window lapsed, or it was swept): about this job,
			// not about this site, so the cycle goes on.
			rep.Refused = append(rep.Refused, Refusal{JobID: claim.JobID, Reason: "relay: " + re.Message})
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
// device. A nil envelope and no refusal means the job is not this site's
// to answer for (published by another process, or already forgotten).
func (c *Client) resealFor(claim protocol.SitePendingJob) (*protocol.SealedEnvelope, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[claim.JobID]
	if !ok {
		return nil, ""
	}
	if j.cancelled {
		// Sealing is the irreversible half: once the ciphertext is with the
		// relay a device can run it.
		return nil, "cancelled here; not sealing it to anybody"
	}
	if j.delivered {
		return nil, "already finished here; not sealing it again"
	}
	device := *claim.Device
	// The relay's word for which key the device holds is checked before
	// anything is sealed to it: an encryption key not signed by the identity
	// presenting it would let whoever holds it read the payload.
	if !protocol.VerifyPublicIdentity(device) {
		return nil, "the claiming device's encryption key is not signed by its identity"
	}
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return nil, "the claiming device's identity is not a key"
	}
	self := c.keys.KeyID()
	plaintext, err := protocol.Open(j.atRest, c.keys, c.keys.Public().Identity, protocol.ExpectedEnvelope{
		JobID: j.stub.ID, SenderKeyID: self, RecipientKeyID: self, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return nil, "this site cannot open its own at-rest payload: " + err.Error()
	}
	envelope, err := protocol.Seal(plaintext, c.keys, device.Encryption, protocol.EnvelopeContext{
		JobID: j.stub.ID, SenderKeyID: self, RecipientKeyID: deviceKeyID,
		// From the record, never a fresh clock read: the at-rest envelope's
		// deadline is what reseal.ts binds (createdAt + the max age).
		DeadlineAt: j.createdAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		return nil, "sealing to the device failed: " + err.Error()
	}
	// A lease the relay granted after an earlier one lapsed is adopted
	// too (the reference site refuses it, which leaves a job whose first
	// device died unfinishable): the relay owns leases, and the result is
	// still accepted only from a device this job was sealed to.
	if !j.sealedToDevice(device) {
		j.sealedTo = append(j.sealedTo, device)
	}
	return &envelope, ""
}

func (c *Client) collectResults(ctx context.Context, rep *Report) error {
	var finished protocol.SiteResultsResponse
	if err := c.get(ctx, "results", &finished); err != nil {
		return err
	}
	for _, done := range finished.Jobs {
		res, refusal := c.accept(done)
		if refusal != "" {
			rep.Refused = append(rep.Refused, Refusal{JobID: done.JobID, Reason: refusal})
			continue
		}
		if res != nil {
			rep.Results = append(rep.Results, *res)
		}
	}
	return nil
}

// accept judges one finished job: nil and no refusal means nothing new
// (already delivered, judged before, or not this site's job).
func (c *Client) accept(done protocol.SiteResult) (*Result, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[done.JobID]
	if !ok || j.delivered || j.refused[done.LeaseID] {
		return nil, ""
	}
	if len(j.sealedTo) == 0 && j.cancelled {
		// A device that was told of the cancel before this site sealed
		// anything reports "canceled" for work it never saw. Nothing to
		// verify it against, and nothing the app does not already know.
		j.refused[done.LeaseID] = true
		return nil, ""
	}
	res, err := c.open(j, done)
	if err != nil {
		j.refused[done.LeaseID] = true
		return nil, err.Error()
	}
	j.delivered = true
	return res, ""
}

func (c *Client) open(j *job, done protocol.SiteResult) (*Result, error) {
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
		if len(j.sealedTo) == 0 {
			return nil, errors.New("a result for a job this site never sealed to any device")
		}
		return nil, errors.New("the relay names a different device than the one this site sealed the work to")
	}
	deviceKeyID, err := protocol.KeyID(done.Device.Identity)
	if err != nil {
		return nil, errors.New("the device's identity is not a key")
	}
	plaintext, err := protocol.Open(*done.Envelope, c.keys, done.Device.Identity, protocol.ExpectedEnvelope{
		JobID: j.stub.ID, SenderKeyID: deviceKeyID, RecipientKeyID: c.keys.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil {
		return nil, fmt.Errorf("the result does not open as the device's: %w", err)
	}
	sealed, err := DecodeSealedOutcome(plaintext, done.Disposition)
	if err != nil {
		return nil, err
	}
	return &Result{
		JobID: j.stub.ID, Outcome: sealed.Outcome, Ran: sealed.Ran,
		RunnerID: done.RunnerID, RunnerOwner: done.RunnerOwner, LeaseID: done.LeaseID,
		Device: *done.Device, DeviceKeyID: deviceKeyID,
		Audience: j.stub.Audience, Untrusted: j.stub.Audience != "private",
	}, nil
}

// forgetPastDeadline drops jobs the relay has dropped too: past their
// deadline nothing more can arrive for them, and a site pumping for days
// must not grow without bound.
func (c *Client) forgetPastDeadline() {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, j := range c.jobs {
		if j.stub.DeadlineAt <= now {
			delete(c.jobs, id)
		}
	}
}

// Pending is how many published jobs have not yet delivered a result.
func (c *Client) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, j := range c.jobs {
		if !j.delivered {
			n++
		}
	}
	return n
}
