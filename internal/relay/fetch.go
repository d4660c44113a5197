package relay

import (
	"log/slog"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// fetch hands over the sealed payload, if the site has left one. The one
// endpoint that differs from a direct site: the relay cannot seal, so it
// waits, and a 409 not-ready means keep polling (the job is still this
// device's until the lease or the awaiting-payload clock says otherwise).
func (r *Relay) fetch(c *call, _ *request, who caller, req protocol.FetchRequest) (reply, error) {
	taken, err := r.store.TakePayload(c.ctx, store.HolderInput{JobID: req.JobID, RunnerID: who.runnerID, LeaseID: req.LeaseID})
	if err != nil {
		return reply{}, err
	}
	if taken.Refused != "" {
		r.decide(c, "refuse-fetch", slog.String("refusal", string(taken.Refused)))
		return refusalReply(taken.Refused, ""), nil
	}
	r.decide(c, "payload-handed-over", slog.String("lease", req.LeaseID))
	return ok(protocol.FetchResponse{Envelope: *taken.Envelope}), nil
}

// result takes a sealed result and its disposition. The relay cannot check
// one against the other (that needs the site's key); the disposition is a
// routing hint so it can stop dispatching.
func (r *Relay) result(c *call, _ *request, who caller, req protocol.ResultRequest) (reply, error) {
	// The ceiling on the way back too: a rail that guarded only the inbound
	// half would be a relay a device could still fill.
	if tooBig := tooLargeEnvelope(req.Envelope); tooBig != nil {
		r.decide(c, "refuse-envelope-too-large")
		return tooLarge(tooBig), nil
	}
	recorded, err := r.store.Complete(c.ctx, store.CompleteInput{
		JobID:       req.JobID,
		RunnerID:    who.runnerID,
		LeaseID:     req.LeaseID,
		Envelope:    req.Envelope,
		Disposition: store.Disposition(req.Disposition),
	})
	if err != nil {
		return reply{}, err
	}
	if recorded.Refused != "" {
		r.decide(c, "refuse-result", slog.String("refusal", string(recorded.Refused)))
		return refusalReply(recorded.Refused, ""), nil
	}
	resp := protocol.ResultResponse{Accepted: recorded.Accepted, State: string(recorded.State)}
	if recorded.Duplicate {
		duplicate := true
		resp.Duplicate = &duplicate
		r.decide(c, "result-duplicate")
	} else {
		r.decide(c, "result-recorded", slog.String("disposition", req.Disposition))
	}
	return ok(resp), nil
}

// release gives grants back. The reason travels to the store: only refused
// is remembered, and the wire carries no not-before.
func (r *Relay) release(c *call, _ *request, who caller, req protocol.ReleaseRequest) (reply, error) {
	released, err := r.store.ReleaseLeases(c.ctx, store.ReleaseInput{
		RunnerID: who.runnerID,
		Leases:   req.Leases,
		Reason:   store.ReleaseReason(req.Reason),
	})
	if err != nil {
		return reply{}, err
	}
	r.decide(c, "released", slog.Any("jobs", released), slog.String("reason", req.Reason))
	if released == nil {
		released = []string{}
	}
	return ok(protocol.ReleaseResponse{Released: released}), nil
}

// tooLargeEnvelope is protocol.CheckEnvelopeSize as the typed refusal.
func tooLargeEnvelope(env protocol.SealedEnvelope) *protocol.EnvelopeTooLargeError {
	if err := protocol.CheckEnvelopeSize(env); err != nil {
		if e, isTooLarge := err.(*protocol.EnvelopeTooLargeError); isTooLarge {
			return e
		}
	}
	return nil
}
