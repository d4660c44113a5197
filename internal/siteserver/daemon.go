package siteserver

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// claim grants work. Capabilities come from this request, never the stored
// matrix: a daemon that just lost a backend must not be handed work for it.
func (s *Server) claim(d daemonCall) (reply, error) {
	var req protocol.ClaimRequest
	runner, now, refusal, err := s.authed(d, &req, func() string { return req.RunnerID })
	if refusal != nil || err != nil {
		return deref(refusal), err
	}
	jobs, err := s.store.Claim(d.ctx, sitestore.ClaimInput{
		RunnerID:     runner.ID,
		RunnerOwner:  runner.Owner,
		Capabilities: req.Capabilities,
		Max:          int(req.Max),
		LeaseMs:      s.leaseMs,
	})
	if err != nil {
		return reply{}, err
	}
	stubs := make([]protocol.ClaimedStub, 0, len(jobs))
	for _, j := range jobs {
		if j.Lease == nil {
			// A store that returns an unleased job from claim broke its
			// contract; inventing a lease would hand out an id nobody knows.
			return reply{}, errNoLease(j.ID)
		}
		stubs = append(stubs, protocol.ClaimedStub{
			ID:       j.ID,
			Kind:     j.Kind,
			Owner:    j.Owner,
			Site:     s.siteKeyID,
			Audience: j.Audience,
			// Only when set; the roster (AudienceAllow) never leaves.
			Purpose:    j.Purpose,
			SizeClass:  j.SizeClass,
			Streaming:  false,
			DeadlineAt: sitestore.DeadlineFor(j, now),
			Lease:      *j.Lease,
		})
	}
	return ok(protocol.ClaimResponse{Jobs: stubs, LeaseMs: s.leaseMs}), nil
}

// heartbeat touches the runner, renews its leases and hands it its cancel
// requests. Revocation arrives as the 403 authed already answered, never as
// an empty site set.
func (s *Server) heartbeat(d daemonCall) (reply, error) {
	var req protocol.HeartbeatRequest
	runner, now, refusal, err := s.authed(d, &req, func() string { return req.RunnerID })
	if refusal != nil || err != nil {
		return deref(refusal), err
	}
	if _, _, err := s.store.TouchRunner(d.ctx, sitestore.TouchInput{
		RunnerID: runner.ID, Capabilities: req.Capabilities, DaemonVersion: req.DaemonVersion,
	}); err != nil {
		return reply{}, err
	}
	renewed, err := s.store.RenewLeases(d.ctx, sitestore.RenewInput{RunnerID: runner.ID, Leases: req.ActiveLeases, LeaseMs: s.leaseMs})
	if err != nil {
		return reply{}, err
	}
	cancel, err := s.store.CancelRequests(d.ctx, runner.ID)
	if err != nil {
		return reply{}, err
	}
	return ok(protocol.HeartbeatResponse{
		Sites:           s.sites(),
		AwaitingConsent: []string{},
		Cancel:          nonNil(cancel),
		Lost:            nonNil(renewed.Lost),
		ServerTime:      now,
	}), nil
}

// fetch hands the payload to the holder of this very lease, resealed from
// the site's own key to the device's. One answer for no such job, not yours
// and a lease you no longer hold: who may know already knows which.
func (s *Server) fetch(d daemonCall) (reply, error) {
	var req protocol.FetchRequest
	runner, now, refusal, err := s.authed(d, &req, func() string { return req.RunnerID })
	if refusal != nil || err != nil {
		return deref(refusal), err
	}
	j, found, err := s.store.Get(d.ctx, req.JobID)
	if err != nil {
		return reply{}, err
	}
	if !found || j.Lease == nil || j.Lease.RunnerID != runner.ID || j.Lease.ID != req.LeaseID {
		return fail(protocol.CodeNotFound, "no such lease on this job"), nil
	}
	if sitestore.PastDeadline(j, now) {
		// Nobody may start a job whose result would be refused.
		return pastDeadline, nil
	}
	env, err := s.resealForDevice(j, runner.Device)
	if err != nil {
		s.log.ErrorContext(d.ctx, "stored envelope does not open", "job", j.ID, "error", err.Error())
		return fail(protocol.CodeServerError, "this job's payload could not be opened"), nil
	}
	return ok(protocol.FetchResponse{Envelope: env}), nil
}

// result opens and verifies the sealed outcome against the leased device's
// pinned key, and compares the sealed outcome with the clear-text
// disposition, before anything is completed: a mismatch is a 400, not a 200
// duplicate, and an outcome nobody can verify is never stored.
func (s *Server) result(d daemonCall) (reply, error) {
	var req protocol.ResultRequest
	runner, now, refusal, err := s.authed(d, &req, func() string { return req.RunnerID })
	if refusal != nil || err != nil {
		return deref(refusal), err
	}
	j, found, err := s.store.Get(d.ctx, req.JobID)
	if err != nil {
		return reply{}, err
	}
	if !found {
		return fail(protocol.CodeNotFound, "unknown job"), nil
	}
	plaintext, err := protocol.Open(req.Envelope, s.keys, runner.Device.Identity, protocol.ExpectedEnvelope{
		JobID:          req.JobID,
		SenderKeyID:    mustKeyID(runner.Device.Identity),
		RecipientKeyID: s.siteKeyID,
		Direction:      protocol.DirectionResult,
	})
	if err != nil {
		return fail(protocol.CodeBadRequest, "the result did not verify as coming from this device"), nil
	}
	sealed, err := protocol.DecodeSealedOutcome(plaintext, req.Disposition)
	if err != nil {
		return fail(protocol.CodeBadRequest, err.Error()), nil
	}
	// Provenance from the job and the authenticated runner plus what the
	// device signed, never from anything beside the envelope.
	prov := sitestore.Provenance{
		Audience:     j.Audience,
		RunnerID:     runner.ID,
		RunnerOwner:  runner.Owner,
		BackendClass: sealed.Ran.BackendClass,
		Model:        sealed.Ran.Model,
		Untrusted:    j.Audience != protocol.AudiencePrivate,
		Stop:         sealed.Ran.Stop,
		StopReported: sealed.Ran.StopReported,
	}
	disposition, answer, err := s.answers.seal(req.JobID, sealed.Outcome, now)
	if err != nil {
		return reply{}, err
	}
	res, err := s.store.Complete(d.ctx, sitestore.CompleteInput{
		JobID:      req.JobID,
		RunnerID:   runner.ID,
		Holder:     sitestore.HolderByLease(req.LeaseID, runner.ID),
		Outcome:    disposition,
		Answer:     answer,
		Provenance: prov,
	})
	if err != nil {
		return reply{}, err
	}
	if res.PastDeadline {
		return pastDeadline, nil
	}
	state := j.State
	if res.Job != nil {
		state = res.Job.State
	}
	out := protocol.ResultResponse{Accepted: res.Accepted, State: state}
	if res.Duplicate {
		t := true
		out.Duplicate = &t
	}
	return ok(out), nil
}

// release gives grants back; only the grant named is released.
func (s *Server) release(d daemonCall) (reply, error) {
	var req protocol.ReleaseRequest
	runner, _, refusal, err := s.authed(d, &req, func() string { return req.RunnerID })
	if refusal != nil || err != nil {
		return deref(refusal), err
	}
	released, err := s.store.Release(d.ctx, sitestore.ReleaseInput{RunnerID: runner.ID, Leases: req.Leases, Reason: req.Reason})
	if err != nil {
		return reply{}, err
	}
	return ok(protocol.ReleaseResponse{Released: nonNil(released)}), nil
}

// pastDeadline is the refusal of a fetch or a result after the job's
// absolute deadline: the relay's answer to a late result (the job is gone,
// swept or not), so a daemon hears one word from either lane.
var pastDeadline = fail(protocol.CodeNotFound, "this job's deadline has passed")

func deref(r *reply) reply {
	if r == nil {
		return reply{}
	}
	return *r
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
