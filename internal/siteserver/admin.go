package siteserver

import (
	"context"
	"net/http"
	"strings"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// Admin is the test-only admin API the conformance kit's target drives:
// reset, enqueue, approve, revoke, cancel, read,
// availability, sweep and clock advance. It can wipe the store and move
// its clock, so it is never part of a deployment: nothing in sitefn builds
// one, and Listen binds it to loopback only.
type Admin struct {
	server *Server
	store  sitestore.Resetter
	clock  *sitestore.OffsetClock
}

// NewAdmin wraps a server whose store can be reset and whose clock is the
// offset clock the store reads.
func NewAdmin(s *Server, reset sitestore.Resetter, clock *sitestore.OffsetClock) *Admin {
	return &Admin{server: s, store: reset, clock: clock}
}

type conformanceJob struct {
	State      string                `json:"state"`
	Outcome    any                   `json:"outcome,omitempty"`
	Provenance *sitestore.Provenance `json:"provenance,omitempty"`
}

// Handle answers one admin request.
func (a *Admin) Handle(ctx context.Context, req Request) Response {
	op, _ := strings.CutPrefix(req.Path, "/admin/")
	handle, known := adminOps[op]
	if !known {
		return encode(fail(protocol.CodeNotFound, "not an admin endpoint"))
	}
	return handle(a, ctx, req.Body)
}

// adminOp answers one admin operation from its request body.
type adminOp func(a *Admin, ctx context.Context, body []byte) Response

// adminOps are the admin API's operations, by the path after /admin/.
var adminOps = map[string]adminOp{
	"reset":            (*Admin).reset,
	"clock/advance":    adminInput((*Admin).advanceClock),
	"enqueue":          adminInput((*Admin).enqueue),
	"pairings/approve": adminInput((*Admin).approvePairing),
	"runners/revoke":   adminInput((*Admin).revokeRunner),
	"jobs/cancel":      adminInput((*Admin).cancelJob),
	"jobs/get":         adminInput((*Admin).getJob),
	"availability":     adminInput((*Admin).availability),
	"sweep":            (*Admin).sweep,
}

// adminInput decodes the body strictly (decodeJSON) into the operation's
// input before the operation runs; a body that does not decode is a 400
// carrying the decode error.
func adminInput[T any](op func(a *Admin, ctx context.Context, in T) Response) adminOp {
	return func(a *Admin, ctx context.Context, body []byte) Response {
		var in T
		if err := decodeJSON(body, &in); err != nil {
			return encode(fail(protocol.CodeBadRequest, err.Error()))
		}
		return op(a, ctx, in)
	}
}

type (
	adminClockAdvance struct {
		Ms int64 `json:"ms"`
	}
	adminRunnerRef struct {
		RunnerID string `json:"runnerId"`
	}
	adminJobRef struct {
		JobID string `json:"jobId"`
	}
)

var adminOK = map[string]bool{"ok": true}

func (a *Admin) reset(ctx context.Context, _ []byte) Response {
	if err := a.store.Reset(ctx); err != nil {
		return appError(err)
	}
	// Site keys are not in the store: daemons pinned them.
	a.clock.Reset()
	return jsonReply(http.StatusOK, adminOK)
}

func (a *Admin) advanceClock(_ context.Context, in adminClockAdvance) Response {
	a.clock.Advance(in.Ms)
	return jsonReply(http.StatusOK, adminOK)
}

func (a *Admin) enqueue(ctx context.Context, in EnqueueInput) Response {
	j, err := a.server.Enqueue(ctx, in)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]string{"id": j.ID})
}

func (a *Admin) approvePairing(ctx context.Context, in codeRef) Response {
	r, err := a.server.ApprovePairing(ctx, in.UserCode, in.Owner)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]string{"runnerId": r.ID})
}

func (a *Admin) revokeRunner(ctx context.Context, in adminRunnerRef) Response {
	if err := a.server.RevokeRunner(ctx, in.RunnerID); err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, adminOK)
}

func (a *Admin) cancelJob(ctx context.Context, in adminJobRef) Response {
	if _, _, err := a.server.Cancel(ctx, in.JobID); err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, adminOK)
}

func (a *Admin) getJob(ctx context.Context, in adminJobRef) Response {
	j, found, err := a.server.Job(ctx, in.JobID)
	if err != nil {
		return appError(err)
	}
	if !found {
		return encode(fail(protocol.CodeNotFound, "no such job"))
	}
	out := conformanceJob{State: j.State, Provenance: j.Provenance}
	if j.Outcome != nil {
		out.Outcome = j.Outcome
	}
	return jsonReply(http.StatusOK, out)
}

func (a *Admin) availability(ctx context.Context, q AvailabilityQuery) Response {
	av, err := a.server.RunnerAvailability(ctx, q)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, av)
}

func (a *Admin) sweep(ctx context.Context, _ []byte) Response {
	if _, err := a.server.Sweep(ctx); err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, adminOK)
}

// ServeHTTP serves the admin API on net/http.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { serve(w, r, a.Handle) }
