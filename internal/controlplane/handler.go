package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// AdminPrefix is the path every admin route sits under, locally and behind
// the deployed IAM-authorised route alike.
const AdminPrefix = "/admin"

// maxBodyBytes bounds a request body. The largest is an import, and the
// stored projection is bounded well below this.
const maxBodyBytes = 8 << 20

// AdminHandler serves the admin API:
//
//	GET    /admin/fixture                   export (body: the fixture), up to MaxWholeExportRecords
//	PUT    /admin/fixture                   import a whole RelayFixture
//	GET    /admin/fixture/pages?cursor=     export one page
//	POST   /admin/fixture/import            import one page
//	POST   /admin/fixture/import/finish     one step of ending an import
//	POST   /admin/sites                     register a site
//	POST   /admin/sites/{siteId}/rotate     rotate a site's key
//	GET    /admin/pairings/pending          list pending pairings, newest first
//	GET    /admin/pairings/{userCode}       show a pending pairing
//	POST   /admin/pairings/approve          approve a pairing
//	POST   /admin/pairings/deny             refuse a pairing (drop its code)
//	POST   /admin/devices/{runnerId}/revoke revoke a device
//	POST   /admin/consents                  add a consent
//	POST   /admin/consents/pause            pause a consent
//	POST   /admin/consents/resume           resume a consent
//	POST   /admin/consents/revoke           revoke a consent
//	POST   /admin/mappings                  map a person's (purpose, kind) at a site to a service
//	POST   /admin/mappings/delete           unmap it
//	POST   /admin/mappings/unique           map every slot whose owner's devices offer one service ({"dryRun":true} to ask)
//	PUT    /admin/sites/{siteId}/purposes   set the purposes a site declares
//	GET    /admin/people/{owner}            a person's consents, mappings, services and jobs waiting on an unmapped slot
//	PUT    /admin/rosters/{id}              create or replace a roster
//	DELETE /admin/rosters/{id}              delete a roster
//
// It authenticates nobody: deployed, it sits behind an IAM-authorised
// route, and locally on loopback.
func AdminHandler(a *Admin) http.Handler {
	mux := http.NewServeMux()
	h := &handler{admin: a}
	mux.HandleFunc("GET "+AdminPrefix+"/fixture", h.export)
	mux.HandleFunc("PUT "+AdminPrefix+"/fixture", h.importFixture)
	mux.HandleFunc("GET "+AdminPrefix+"/fixture/pages", h.exportPage)
	mux.HandleFunc("POST "+AdminPrefix+"/fixture/import", h.importPage)
	mux.HandleFunc("POST "+AdminPrefix+"/fixture/import/finish", h.finishImport)
	mux.HandleFunc("POST "+AdminPrefix+"/sites", h.registerSite)
	mux.HandleFunc("POST "+AdminPrefix+"/sites/{siteId}/rotate", h.rotateSite)
	// A literal segment outranks the wildcard, and no user code can be
	// "pending" (codes are XXXX-XXXX).
	mux.HandleFunc("GET "+AdminPrefix+"/pairings/pending", h.pendingPairings)
	mux.HandleFunc("GET "+AdminPrefix+"/pairings/{userCode}", h.pairing)
	mux.HandleFunc("POST "+AdminPrefix+"/pairings/approve", h.approve)
	mux.HandleFunc("POST "+AdminPrefix+"/pairings/deny", h.deny)
	mux.HandleFunc("POST "+AdminPrefix+"/devices/{runnerId}/revoke", h.revokeDevice)
	mux.HandleFunc("POST "+AdminPrefix+"/consents", h.consent((*Admin).AddConsent))
	mux.HandleFunc("POST "+AdminPrefix+"/consents/pause", h.consent((*Admin).PauseConsent))
	mux.HandleFunc("POST "+AdminPrefix+"/consents/resume", h.consent((*Admin).ResumeConsent))
	mux.HandleFunc("POST "+AdminPrefix+"/consents/revoke", h.consent((*Admin).RevokeConsent))
	mux.HandleFunc("POST "+AdminPrefix+"/mappings", h.mapSlot)
	mux.HandleFunc("POST "+AdminPrefix+"/mappings/delete", h.unmapSlot)
	mux.HandleFunc("POST "+AdminPrefix+"/mappings/unique", h.mapUnique)
	mux.HandleFunc("PUT "+AdminPrefix+"/sites/{siteId}/purposes", h.sitePurposes)
	mux.HandleFunc("GET "+AdminPrefix+"/people/{owner}", h.person)
	mux.HandleFunc("PUT "+AdminPrefix+"/rosters/{id}", h.putRoster)
	mux.HandleFunc("DELETE "+AdminPrefix+"/rosters/{id}", h.deleteRoster)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorResponse{Error: "not-found", Message: "no admin route " + r.Method + " " + r.URL.Path})
	})
	return mux
}

type handler struct{ admin *Admin }

func (h *handler) export(w http.ResponseWriter, r *http.Request) {
	f, err := h.admin.Export(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (h *handler) exportPage(w http.ResponseWriter, r *http.Request) {
	page, err := h.admin.ExportPage(r.Context(), r.URL.Query().Get("cursor"))
	h.answer(w, r, page, err)
}

func (h *handler) importPage(w http.ResponseWriter, r *http.Request) {
	var req ImportPageRequest
	if !h.decode(w, r, &req) {
		return
	}
	res, err := h.admin.ImportPage(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) finishImport(w http.ResponseWriter, r *http.Request) {
	var req ImportFinishRequest
	if !h.decode(w, r, &req) {
		return
	}
	res, err := h.admin.FinishImport(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) importFixture(w http.ResponseWriter, r *http.Request) {
	body, err := readObject(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	f, err := projection.Parse(body)
	if err != nil {
		h.fail(w, r, invalid("%v", err))
		return
	}
	res, err := h.admin.Import(r.Context(), f)
	h.answer(w, r, res, err)
}

func (h *handler) registerSite(w http.ResponseWriter, r *http.Request) {
	var req RegisterSiteRequest
	if !h.decode(w, r, &req) {
		return
	}
	site, version, err := h.admin.RegisterSite(r.Context(), req.SiteID, req.Site)
	h.answerStatus(w, r, http.StatusCreated, SiteResponse{Version: version, Site: site}, err)
}

func (h *handler) rotateSite(w http.ResponseWriter, r *http.Request) {
	var req RotateSiteRequest
	if !h.decode(w, r, &req) {
		return
	}
	site, version, err := h.admin.RotateSite(r.Context(), r.PathValue("siteId"), req.Site, req.Succession)
	h.answer(w, r, SiteResponse{Version: version, Site: site}, err)
}

func (h *handler) pairing(w http.ResponseWriter, r *http.Request) {
	p, err := h.admin.PendingPairing(r.Context(), r.PathValue("userCode"))
	h.answer(w, r, p, err)
}

func (h *handler) pendingPairings(w http.ResponseWriter, r *http.Request) {
	list, err := h.admin.PendingPairings(r.Context())
	h.answer(w, r, list, err)
}

func (h *handler) approve(w http.ResponseWriter, r *http.Request) {
	var req ApproveRequest
	if !h.decode(w, r, &req) {
		return
	}
	a, version, err := h.admin.ApprovePairing(r.Context(), req.UserCode, req.Owner, req.RunnerID)
	h.answer(w, r, DeviceResponse{Version: version, Device: a.Device, Label: a.Label, Platform: a.Platform}, err)
}

func (h *handler) deny(w http.ResponseWriter, r *http.Request) {
	var req DenyRequest
	if !h.decode(w, r, &req) {
		return
	}
	p, err := h.admin.DenyPairing(r.Context(), req.UserCode)
	h.answer(w, r, p, err)
}

func (h *handler) revokeDevice(w http.ResponseWriter, r *http.Request) {
	d, version, err := h.admin.RevokeDevice(r.Context(), r.PathValue("runnerId"))
	h.answer(w, r, DeviceResponse{Version: version, Device: d}, err)
}

func (h *handler) consent(change func(*Admin, context.Context, string, string) (ConsentState, int64, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req ConsentRequest
		if !h.decode(w, r, &req) {
			return
		}
		state, version, err := change(h.admin, r.Context(), req.Owner, req.SiteID)
		h.answer(w, r, ConsentResponse{Version: version, Consent: state}, err)
	}
}

func (h *handler) mapSlot(w http.ResponseWriter, r *http.Request) {
	var req MapRequest
	if !h.decode(w, r, &req) {
		return
	}
	res, err := h.admin.Map(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) unmapSlot(w http.ResponseWriter, r *http.Request) {
	var req UnmapRequest
	if !h.decode(w, r, &req) {
		return
	}
	res, err := h.admin.Unmap(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) mapUnique(w http.ResponseWriter, r *http.Request) {
	var req MapUniqueRequest
	if !h.decode(w, r, &req) {
		return
	}
	res, err := h.admin.MapUnique(r.Context(), req)
	h.answer(w, r, res, err)
}

func (h *handler) person(w http.ResponseWriter, r *http.Request) {
	res, err := h.admin.Person(r.Context(), r.PathValue("owner"))
	h.answer(w, r, res, err)
}

func (h *handler) sitePurposes(w http.ResponseWriter, r *http.Request) {
	var req SitePurposesRequest
	if !h.decode(w, r, &req) {
		return
	}
	site, version, err := h.admin.SetSitePurposes(r.Context(), r.PathValue("siteId"), req.Purposes)
	h.answer(w, r, SiteResponse{Version: version, Site: site}, err)
}

func (h *handler) putRoster(w http.ResponseWriter, r *http.Request) {
	var req RosterRequest
	if !h.decode(w, r, &req) {
		return
	}
	roster, version, err := h.admin.PutRoster(r.Context(), r.PathValue("id"), req.Owner, req.Members)
	h.answer(w, r, RosterResponse{Version: version, Roster: roster}, err)
}

func (h *handler) deleteRoster(w http.ResponseWriter, r *http.Request) {
	version, err := h.admin.DeleteRoster(r.Context(), r.PathValue("id"))
	h.answer(w, r, VersionResponse{Version: version}, err)
}

// decode reads a strict JSON body into v, answering 400 itself when it
// cannot.
func (h *handler) decode(w http.ResponseWriter, r *http.Request, v protocol.Validator) bool {
	body, err := readObject(w, r)
	if err == nil {
		if derr := protocol.DecodeStrict(body, v); derr != nil {
			err = invalid("%v", derr)
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

// readObject is readBody of a body that must be one JSON object in UTF-8
// (protocol.CheckBody): a refusal names what is wrong with the bytes (a
// trailing value, a byte-order mark, an array, where the JSON breaks)
// rather than only that they are not what a schema wanted.
func readObject(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	if problem := protocol.CheckBody(body); problem != nil {
		return nil, invalid("%s", problem.Problem)
	}
	return body, nil
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: "too-large", Message: "the body is larger than " + strconv.Itoa(maxBodyBytes) + " bytes"}
	}
	if err != nil {
		return nil, invalid("the body could not be read: %v", err)
	}
	return body, nil
}

func (h *handler) answer(w http.ResponseWriter, r *http.Request, body any, err error) {
	h.answerStatus(w, r, http.StatusOK, body, err)
}

func (h *handler) answerStatus(w http.ResponseWriter, r *http.Request, status int, body any, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, status, body)
}

// fail maps an error to its answer, in this one place. A refusal is the
// caller's to fix and is logged as information; anything else is ours.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var refusal *Error
	if errors.As(err, &refusal) {
		h.admin.log.InfoContext(r.Context(), "admin change refused", "method", r.Method, "path", r.URL.Path, "status", refusal.Status, "reason", refusal.Message)
		writeJSON(w, refusal.Status, ErrorResponse{Error: refusal.Code, Message: refusal.Message})
		return
	}
	h.admin.log.ErrorContext(r.Context(), "admin change failed", "method", r.Method, "path", r.URL.Path, slog.Any("err", err))
	writeJSON(w, http.StatusInternalServerError, ErrorResponse{Error: "server-error", Message: "the change could not be confirmed; export the projection to see whether it landed"})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	data, err := json.Marshal(body)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":"server-error","message":"the answer could not be encoded"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
