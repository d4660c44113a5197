package relay

import (
	"log/slog"
	"net/http"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

var (
	stubNamesOtherSite = fail(http.StatusForbidden, protocol.CodeForbidden, "that stub does not name the site that signed it")
	// 503, not a 409 and not a 500: the enqueue 409 class is the refusal
	// class (a site abandons the job), and a failed read is a transient
	// condition. The reason stays here; a site learns we could not answer,
	// never what could not.
	satisfiableFailed = fail(http.StatusServiceUnavailable, protocol.CodeServerError, "we could not check this just now — try again shortly")
	slotUnsatisfiable = fail(http.StatusConflict, protocol.CodeSlotUnsatisfiable, "nobody has chosen what answers this yet")
	slotWaiting       = fail(http.StatusConflict, protocol.CodeSlotWaiting, "nothing can answer this right now — try again later")
)

// enqueue publishes a stub for routing. Idempotent per (site, id): a
// republish answers the job as it stands, and never yanks it back from a
// machine running it.
func (r *Relay) enqueue(c *call, q *request, siteID string, req protocol.EnqueueRequest) (reply, error) {
	// The stub names a site by key id; the signature says who is asking.
	// They have to agree, against the current key even when a retiring key
	// signed: a caller that could publish stubs naming another site would
	// hand that site's daemons work sealed by the wrong key.
	registered, found := q.proj.SiteFor(siteID)
	current := ""
	if found {
		current, _ = protocol.KeyID(registered.Site.Identity)
	}
	if !found || current == "" || current != req.Stub.Site {
		r.decide(c, "refuse-stub-names-other-site")
		return stubNamesOtherSite, nil
	}

	// Refused here or never: a purpose the manifest does not declare will
	// not appear by waiting, and a person who maps a slot later is served by
	// the next job. Nothing turns a failed read into a refusal.
	if r.cfg.Satisfiable != nil {
		verdict, err := r.cfg.Satisfiable(c.ctx, SatisfiableQuery{
			SiteID:     siteID,
			Owner:      req.Stub.Owner,
			Purpose:    req.Stub.Purpose,
			Kind:       req.Stub.Kind,
			Projection: q.proj,
		})
		if err != nil {
			r.decide(c, "refuse-satisfiable-unavailable", slog.String("error", err.Error()))
			return satisfiableFailed, nil
		}
		switch verdict {
		case VerdictNotDeclared:
			purpose := req.Stub.Purpose
			if purpose == "" {
				purpose = "that purpose"
			}
			r.decide(c, "refuse-purpose-not-declared")
			return fail(http.StatusConflict, protocol.CodePurposeNotDeclared,
				"this site does not declare "+purpose+" — "+
					"declare it on Developer Sites, and the people who have already "+
					"connected will each map the new slot before it routes"), nil
		case VerdictUnmapped:
			// One sentence, never why: which service, whose device and
			// whether one exists are all the person's.
			r.decide(c, "refuse-slot-unsatisfiable")
			return slotUnsatisfiable, nil
		case VerdictWaiting:
			// Needs only time, not the person; no duration and no cause,
			// which would say how much somebody has worked today.
			r.decide(c, "refuse-slot-waiting")
			return slotWaiting, nil
		}
	}

	job, err := r.store.Enqueue(c.ctx, store.EnqueueInput{ID: req.Stub.ID, SiteID: siteID, Stub: req.Stub})
	if err != nil {
		return reply{}, err
	}
	r.decide(c, "enqueued", slog.String("state", string(job.State)), slog.String("kind", req.Stub.Kind))
	return ok(protocol.JobStateResponse{JobID: job.ID, State: string(job.State)}), nil
}
