package siteserver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// The app API: the site's own backend calling its direct lane over HTTP
// (POST /app/<operation>, JSON in and out). Deployed, it sits behind
// API Gateway's IAM authorisation: only the site's backend role can call
// it, and it trusts the owner that backend names as the signed-in user.
// Every operation on a job or runner names that owner, and one belonging
// to somebody else is answered exactly like one that does not exist.

// AppPrefix is where the app API is mounted.
const AppPrefix = "/app/"

type (
	jobRef struct {
		JobID string `json:"jobId"`
		Owner string `json:"owner"`
	}
	codeRef struct {
		UserCode string `json:"userCode"`
		Owner    string `json:"owner,omitempty"`
	}
	ownerRef struct {
		Owner string `json:"owner"`
	}
	runnerRef struct {
		RunnerID string `json:"runnerId"`
		Owner    string `json:"owner"`
	}
)

// JobView is the app's read of a job: everything but the envelope and the
// roster's internals.
type JobView struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	Owner       string   `json:"owner"`
	Audience    string   `json:"audience"`
	Purpose     string   `json:"purpose,omitempty"`
	SizeClass   string   `json:"sizeClass"`
	State       string   `json:"state"`
	Attempts    int64    `json:"attempts"`
	DependsOn   []string `json:"dependsOn"`
	CreatedAt   int64    `json:"createdAt"`
	ClaimableAt int64    `json:"claimableAt,omitempty"`
	DeadlineAt  int64    `json:"deadlineAt,omitempty"`
	TTLMs       int64    `json:"ttlMs"`
	// Waiting says why a queued job has not started, when the site knows
	// (Waiting); absent otherwise.
	Waiting string `json:"waiting,omitempty"`
}

// view is viewOf at the store clock's now.
func (s *Server) view(ctx context.Context, j sitestore.Job) JobView {
	now, err := s.store.Now(ctx)
	if err != nil {
		now = j.UpdatedAt
	}
	return viewOf(j, now)
}

func viewOf(j sitestore.Job, now int64) JobView {
	return JobView{ID: j.ID, Kind: j.Kind, Owner: j.Owner, Audience: j.Audience, Purpose: j.Purpose,
		SizeClass: j.SizeClass, State: j.State, Attempts: j.Attempts, DependsOn: nonNil(j.DependsOn),
		CreatedAt: j.CreatedAt, ClaimableAt: j.ClaimableAt, DeadlineAt: j.DeadlineAt, TTLMs: j.TTLMs,
		Waiting: Waiting(j, now)}
}

// RunnerView is the app's read of a runner.
type RunnerView struct {
	ID              string                  `json:"id"`
	Owner           string                  `json:"owner"`
	Label           string                  `json:"label"`
	Platform        string                  `json:"platform"`
	DaemonVersion   string                  `json:"daemonVersion"`
	Capabilities    []protocol.Capability   `json:"capabilities"`
	RevokedAt       int64                   `json:"revokedAt,omitempty"`
	LastHeartbeatAt int64                   `json:"lastHeartbeatAt"`
	CreatedAt       int64                   `json:"createdAt"`
	Device          protocol.PublicIdentity `json:"device"`
}

func runnerView(r sitestore.Runner) RunnerView {
	return RunnerView{ID: r.ID, Owner: r.Owner, Label: r.Label, Platform: r.Platform, DaemonVersion: r.DaemonVersion,
		Capabilities: nonNil(r.Capabilities), RevokedAt: r.RevokedAt, LastHeartbeatAt: r.LastHeartbeatAt,
		CreatedAt: r.CreatedAt, Device: r.Device}
}

var (
	appNotFound = encode(fail(protocol.CodeNotFound, "no such job or runner for this owner"))
	appNoRoute  = encode(fail(protocol.CodeNotFound, "not an app endpoint"))
)

// HandleApp answers one app API request.
func (s *Server) HandleApp(ctx context.Context, req Request) Response {
	op, found := strings.CutPrefix(strings.TrimSuffix(req.Path, "/"), AppPrefix)
	if !found {
		return appNoRoute
	}
	if req.Method != http.MethodPost {
		return encode(reply{status: http.StatusMethodNotAllowed, body: protocol.NewWireError(protocol.CodeBadRequest, "app endpoints accept POST only")})
	}
	if len(req.Body) > MaxBodyBytes {
		return encode(fail(protocol.CodeBadRequest, protocol.TooLargeMessage(int64(len(req.Body)), MaxBodyBytes)))
	}
	handle, known := appOps[op]
	if !known {
		return appNoRoute
	}
	return handle(s, ctx, req.Body)
}

// appOp answers one app operation from its request body.
type appOp func(s *Server, ctx context.Context, body []byte) Response

// appOps are the app API's operations, by the path after AppPrefix.
var appOps = map[string]appOp{
	"enqueue":          withInput((*Server).appEnqueue),
	"job":              withInput((*Server).appJob),
	"result":           withInput((*Server).appResult),
	"cancel":           withInput((*Server).appCancel),
	"availability":     withInput((*Server).appAvailability),
	"pairings/lookup":  withInput((*Server).appPendingPairing),
	"pairings/pending": withInput((*Server).appPendingPairing),
	"pairings/approve": withInput((*Server).appApprovePairing),
	"pairings/deny":    withInput((*Server).appDenyPairing),
	"runners":          withInput((*Server).appRunners),
	"runners/revoke":   withInput((*Server).appRevokeRunner),
	"sweep":            withInput((*Server).appSweep),
}

// withInput decodes the body strictly (decodeJSON) into the operation's
// input before the operation runs. A body that is not one JSON object is
// refused for what is wrong with it; one that is, but does not fit the
// input, as failing schema validation.
func withInput[T any](op func(s *Server, ctx context.Context, in T) Response) appOp {
	return func(s *Server, ctx context.Context, body []byte) Response {
		var in T
		if err := decodeJSON(body, &in); err != nil {
			var problem *protocol.BodyError
			if errors.As(err, &problem) {
				return encode(wireReply(problem.WireError()))
			}
			return encode(fail(protocol.CodeBadRequest, "request body failed schema validation: "+err.Error()))
		}
		return op(s, ctx, in)
	}
}

func (s *Server) appEnqueue(ctx context.Context, in EnqueueInput) Response {
	j, err := s.Enqueue(ctx, in)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, s.view(ctx, j))
}

// ownedJob reads the job a request names, with the sweep, before anything
// acts on it, and refuses another owner's job as one that does not exist,
// before anything is written.
func (s *Server) ownedJob(ctx context.Context, in jobRef) (sitestore.Job, *Response) {
	if in.JobID == "" || in.Owner == "" {
		refusal := encode(fail(protocol.CodeBadRequest, "jobId and owner are required"))
		return sitestore.Job{}, &refusal
	}
	j, found, err := s.Job(ctx, in.JobID)
	if err != nil {
		refusal := appError(err)
		return sitestore.Job{}, &refusal
	}
	if !found || j.Owner != in.Owner {
		refusal := appNotFound
		return sitestore.Job{}, &refusal
	}
	return j, nil
}

func (s *Server) appJob(ctx context.Context, in jobRef) Response {
	j, refusal := s.ownedJob(ctx, in)
	if refusal != nil {
		return *refusal
	}
	return jsonReply(http.StatusOK, s.view(ctx, j))
}

func (s *Server) appResult(ctx context.Context, in jobRef) Response {
	j, refusal := s.ownedJob(ctx, in)
	if refusal != nil {
		return *refusal
	}
	return jsonReply(http.StatusOK, ResultOf(j))
}

func (s *Server) appCancel(ctx context.Context, in jobRef) Response {
	if _, refusal := s.ownedJob(ctx, in); refusal != nil {
		return *refusal
	}
	j, _, err := s.Cancel(ctx, in.JobID)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, s.view(ctx, j))
}

func (s *Server) appAvailability(ctx context.Context, q AvailabilityQuery) Response {
	if q.Owner == "" || q.Kind == "" {
		return encode(fail(protocol.CodeBadRequest, "kind and owner are required"))
	}
	a, err := s.RunnerAvailability(ctx, q)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, a)
}

// codeMissing refuses a pairing operation that names no pairing: every one
// names it by the code a person typed.
func codeMissing(in codeRef) *Response {
	if in.UserCode != "" {
		return nil
	}
	refusal := encode(fail(protocol.CodeBadRequest, "userCode is required"))
	return &refusal
}

// appPendingPairing is a lookup by the code a person typed: the machine
// asking, for the page to show before Approve. Its key id is the
// fingerprint the daemon printed; the person compares the two, because
// anybody can start a pairing and the code alone does not say which
// machine asked. pairings/pending is the same call under the name site
// backends already use.
func (s *Server) appPendingPairing(ctx context.Context, in codeRef) Response {
	if refusal := codeMissing(in); refusal != nil {
		return *refusal
	}
	p, found, err := s.PendingPairing(ctx, in.UserCode)
	if err != nil {
		return appError(err)
	}
	if !found {
		return encode(fail(protocol.CodeNotFound, "no pending pairing with that code"))
	}
	answer := map[string]any{"userCode": p.UserCode, "label": p.Label, "platform": p.Platform,
		"daemonVersion": p.DaemonVersion, "capabilities": nonNil(p.Capabilities), "expiresAt": p.ExpiresAt}
	if keyID, err := protocol.KeyID(p.Device.Identity); err == nil {
		answer["fingerprint"] = keyID
	}
	return jsonReply(http.StatusOK, answer)
}

func (s *Server) appApprovePairing(ctx context.Context, in codeRef) Response {
	if refusal := codeMissing(in); refusal != nil {
		return *refusal
	}
	r, err := s.ApprovePairing(ctx, in.UserCode, in.Owner)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]string{"runnerId": r.ID})
}

func (s *Server) appDenyPairing(ctx context.Context, in codeRef) Response {
	if refusal := codeMissing(in); refusal != nil {
		return *refusal
	}
	if err := s.DenyPairing(ctx, in.UserCode); err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]bool{"denied": true})
}

func (s *Server) appRunners(ctx context.Context, in ownerRef) Response {
	if in.Owner == "" {
		return encode(fail(protocol.CodeBadRequest, "owner is required"))
	}
	rs, err := s.Runners(ctx, in.Owner)
	if err != nil {
		return appError(err)
	}
	views := []RunnerView{}
	for _, r := range rs {
		views = append(views, runnerView(r))
	}
	return jsonReply(http.StatusOK, map[string]any{"runners": views})
}

// appRevokeRunner refuses another owner's runner as one that does not
// exist, before anything is written.
func (s *Server) appRevokeRunner(ctx context.Context, in runnerRef) Response {
	if in.RunnerID == "" || in.Owner == "" {
		return encode(fail(protocol.CodeBadRequest, "runnerId and owner are required"))
	}
	r, found, err := s.store.Runner(ctx, in.RunnerID)
	if err != nil {
		return appError(err)
	}
	if !found || r.Owner != in.Owner {
		return appNotFound
	}
	if err := s.RevokeRunner(ctx, in.RunnerID); err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]bool{"revoked": true})
}

func (s *Server) appSweep(ctx context.Context, _ struct{}) Response {
	changed, err := s.Sweep(ctx)
	if err != nil {
		return appError(err)
	}
	return jsonReply(http.StatusOK, map[string]int{"changed": len(changed)})
}

// AppHandler serves the app API on net/http.
func (s *Server) AppHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, r, s.HandleApp) })
}
