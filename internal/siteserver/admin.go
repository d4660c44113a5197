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
	bad := func(err error) Response {
		return encode(fail(protocol.CodeBadRequest, err.Error()))
	}
	s := a.server
	switch op {
	case "reset":
		if err := a.store.Reset(ctx); err != nil {
			return appError(err)
		}
		// Site keys are not in the store: daemons pinned them.
		a.clock.Reset()
		return jsonReply(http.StatusOK, map[string]bool{"ok": true})
	case "clock/advance":
		var in struct {
			Ms int64 `json:"ms"`
		}
		if err := decodeJSON(req.Body, &in); err != nil {
			return bad(err)
		}
		a.clock.Advance(in.Ms)
		return jsonReply(http.StatusOK, map[string]bool{"ok": true})
	case "enqueue":
		var in EnqueueInput
		if err := decodeJSON(req.Body, &in); err != nil {
			return bad(err)
		}
		j, err := s.Enqueue(ctx, in)
		if err != nil {
			return appError(err)
		}
		return jsonReply(http.StatusOK, map[string]string{"id": j.ID})
	case "pairings/approve":
		var in codeRef
		if err := decodeJSON(req.Body, &in); err != nil {
			return bad(err)
		}
		r, err := s.ApprovePairing(ctx, in.UserCode, in.Owner)
		if err != nil {
			return appError(err)
		}
		return jsonReply(http.StatusOK, map[string]string{"runnerId": r.ID})
	case "runners/revoke":
		var in struct {
			RunnerID string `json:"runnerId"`
		}
		if err := decodeJSON(req.Body, &in); err != nil {
			return bad(err)
		}
		if err := s.RevokeRunner(ctx, in.RunnerID); err != nil {
			return appError(err)
		}
		return jsonReply(http.StatusOK, map[string]bool{"ok": true})
	case "jobs/cancel", "jobs/get":
		var in struct {
			JobID string `json:"jobId"`
		}
		if err := decodeJSON(req.Body, &in); err != nil {
			return bad(err)
		}
		if op == "jobs/cancel" {
			if _, _, err := s.Cancel(ctx, in.JobID); err != nil {
				return appError(err)
			}
			return jsonReply(http.StatusOK, map[string]bool{"ok": true})
		}
		j, found, err := s.Job(ctx, in.JobID)
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
	case "availability":
		var q AvailabilityQuery
		if err := decodeJSON(req.Body, &q); err != nil {
			return bad(err)
		}
		av, err := s.RunnerAvailability(ctx, q)
		if err != nil {
			return appError(err)
		}
		return jsonReply(http.StatusOK, av)
	case "sweep":
		if _, err := s.Sweep(ctx); err != nil {
			return appError(err)
		}
		return jsonReply(http.StatusOK, map[string]bool{"ok": true})
	}
	return encode(fail(protocol.CodeNotFound, "not an admin endpoint"))
}

// ServeHTTP serves the admin API on net/http.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { serve(w, r, a.Handle) }
