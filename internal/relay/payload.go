package relay

import (
	"log/slog"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// payload takes the site's envelope, sealed to the device that claimed the
// job. The check and the write are one store call: a site that read
// awaiting-payload and then wrote would be racing the timeout that makes
// the state mean anything.
func (r *Relay) payload(c *call, _ *request, siteID string, req protocol.PayloadRequest) (reply, error) {
	// Before acceptance: the point of a relay-memory rail is that the
	// oversized thing is never held.
	if tooBig := tooLargeEnvelope(req.Envelope); tooBig != nil {
		r.decide(c, "refuse-envelope-too-large")
		return tooLarge(tooBig), nil
	}
	sealed, err := r.store.Seal(c.ctx, store.SealInput{SiteID: siteID, JobID: req.JobID, Envelope: req.Envelope})
	if err != nil {
		return reply{}, err
	}
	if sealed.Refused != "" {
		r.decide(c, "refuse-seal", slog.String("refusal", string(sealed.Refused)), slog.String("was", string(sealed.Was)))
		return refusalReply(sealed.Refused, sealed.Was), nil
	}
	r.decide(c, "sealed")
	return ok(protocol.JobStateResponse{JobID: req.JobID, State: string(sealed.State)}), nil
}

// cancel withdraws a job. Not a delete: a device running it has to be told,
// at its next heartbeat. Quiet about what it did not find: answering
// "already cancelled" and "never existed" differently would tell a caller
// whether an id is real.
func (r *Relay) cancel(c *call, _ *request, siteID string, req protocol.CancelRequest) (reply, error) {
	cancelled, err := r.store.Cancel(c.ctx, siteID, req.JobID)
	if err != nil {
		return reply{}, err
	}
	r.decide(c, "cancel", slog.Bool("cancelled", cancelled))
	return ok(protocol.CancelResponse{Cancelled: cancelled}), nil
}
