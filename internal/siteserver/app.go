package siteserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// MaxDependsOn bounds a job's dependencies: each is an edge a store writes
// with the job (DynamoDB in one transaction, at most 100 items).
const MaxDependsOn = 32

// EnqueueInput is a job as the site's backend asks for it. Payload is the raw
// JSON of the payload, validated strictly against Kind: a key the daemon does
// not know (command, argv, model, baseUrl) is refused here, not carried to a
// machine that might act on it.
type EnqueueInput struct {
	ID            string          `json:"id,omitempty"`
	Kind          string          `json:"kind"`
	Payload       json.RawMessage `json:"payload"`
	Owner         string          `json:"owner"`
	Audience      string          `json:"audience,omitempty"`
	Purpose       string          `json:"purpose,omitempty"`
	AudienceAllow []string        `json:"audienceAllow,omitempty"`
	DependsOn     []string        `json:"dependsOn,omitempty"`
	TTLMs         int64           `json:"ttlMs,omitempty"`
	DeadlineAt    int64           `json:"deadlineAt,omitempty"`
	// Streaming asks for a live token stream (cloud lane only: the job is
	// offered only to devices that opted in, docs/streaming.md).
	Streaming bool `json:"streaming,omitempty"`
}

// InvalidInput is the app's refusal of a request it will not act on; the
// HTTP front ends answer it 400 bad-request.
type InvalidInput struct{ Reason string }

func (e *InvalidInput) Error() string { return e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidInput{Reason: fmt.Sprintf(format, args...)}
}

// Enqueue validates, seals the payload to the site itself and stores the
// job. The clock is read once: the envelope's deadline and the record's
// createdAt must agree, or fetch would reseal a deadline the at-rest
// envelope never bound.
func (s *Server) Enqueue(ctx context.Context, in EnqueueInput) (sitestore.Job, error) {
	if !slices.Contains(protocol.JobKinds, in.Kind) {
		return sitestore.Job{}, invalid("kind %q is not one of %v", in.Kind, protocol.JobKinds)
	}
	if in.Owner == "" {
		return sitestore.Job{}, invalid("owner is required")
	}
	if in.Audience != "" && !slices.Contains(protocol.Audiences, in.Audience) {
		return sitestore.Job{}, invalid("audience %q is not one of %v", in.Audience, protocol.Audiences)
	}
	if len(in.DependsOn) > MaxDependsOn {
		return sitestore.Job{}, invalid("a job may depend on at most %d others", MaxDependsOn)
	}
	if in.TTLMs < 0 || in.DeadlineAt < 0 {
		return sitestore.Job{}, invalid("ttlMs and deadlineAt must not be negative")
	}
	if len(in.Payload) == 0 {
		return sitestore.Job{}, invalid("payload is required")
	}
	payload, err := protocol.DecodeJobPayload(string(in.Payload), in.Kind)
	if err == nil {
		err = payload.Validate()
	}
	if err != nil {
		return sitestore.Job{}, invalid("invalid %s payload: %v", in.Kind, err)
	}
	plaintext, err := payload.Plaintext()
	if err != nil {
		return sitestore.Job{}, invalid("invalid %s payload: %v", in.Kind, err)
	}
	id := in.ID
	if id == "" {
		id = sitestore.NewID()
	}
	if s.cloud != nil {
		return s.enqueueCloud(ctx, id, in, payload)
	}
	if in.Streaming {
		return sitestore.Job{}, invalid("live streams are the cloud lane's")
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return sitestore.Job{}, err
	}
	env, err := s.sealAtRest(id, plaintext, now)
	if err != nil {
		return sitestore.Job{}, err
	}
	j, err := s.store.Create(ctx, sitestore.CreateInput{
		ID:            id,
		Kind:          in.Kind,
		Envelope:      env,
		SizeClass:     protocol.SizeClassOf(payload.TextLength()),
		Audience:      in.Audience,
		Purpose:       in.Purpose,
		Owner:         in.Owner,
		AudienceAllow: in.AudienceAllow,
		DependsOn:     in.DependsOn,
		TTLMs:         in.TTLMs,
		DeadlineAt:    in.DeadlineAt,
	})
	if errors.Is(err, sitestore.ErrTooLarge) {
		return sitestore.Job{}, invalid("%v", err)
	}
	// Create is idempotent by id: an id used before answers with that job.
	j, _, err = s.opened(j, true, err)
	return j, err
}

// Job sweeps, then reads: a job past its TTL reads expired even if the
// scheduled sweep has not run. Its answer is opened (Outcome is the
// device's whole outcome): this is the app reading it.
func (s *Server) Job(ctx context.Context, id string) (sitestore.Job, bool, error) {
	return s.opened(s.store.Refresh(ctx, id))
}

// opened is a store read with the job's sealed answer opened.
func (s *Server) opened(j sitestore.Job, found bool, err error) (sitestore.Job, bool, error) {
	if err != nil || !found {
		return j, found, err
	}
	j, err = s.answers.open(j)
	return j, err == nil, err
}

// JobResult is what the app reads of a job (DeliveredResult).
type JobResult struct {
	JobID      string                `json:"jobId"`
	State      string                `json:"state"`
	Outcome    *protocol.Outcome     `json:"outcome,omitempty"`
	Provenance *sitestore.Provenance `json:"provenance,omitempty"`
	// Reason says why a cloud-lane job ended without a device's result
	// (evicted, a result refused, the stub refused).
	Reason string `json:"reason,omitempty"`
}

// ResultOf is a job as the app reads it, from the job as Job returns it
// (its answer opened).
func ResultOf(j sitestore.Job) JobResult {
	return JobResult{JobID: j.ID, State: j.State, Outcome: j.Outcome, Provenance: j.Provenance, Reason: j.EndReason}
}

// Result is Job read as a result; false if unknown.
func (s *Server) Result(ctx context.Context, id string) (JobResult, bool, error) {
	j, found, err := s.Job(ctx, id)
	if err != nil || !found {
		return JobResult{}, found, err
	}
	return ResultOf(j), true, nil
}

// Cancel cancels a job; false if unknown. A queued job is cancelled at
// once, a held one asks its holder. On the cloud lane the relay is told
// too (it stops offering the job and tells the holding device), and once
// it has answered the job ends cancelled here; after an error, call Cancel
// again (both halves are idempotent).
func (s *Server) Cancel(ctx context.Context, id string) (sitestore.Job, bool, error) {
	if s.cloud == nil {
		return s.opened(s.store.Cancel(ctx, id))
	}
	if _, found, err := s.store.Get(ctx, id); err != nil || !found {
		return sitestore.Job{}, found, err
	}
	if _, err := s.cloud.Cancel(ctx, id); err != nil {
		return sitestore.Job{}, true, err
	}
	return s.opened(s.store.Get(ctx, id))
}

// Subscribe calls onChange after every write this process makes to the
// job (the push seam a web backend turns into server-sent events): read
// the job again on each call. It unsubscribes with the returned function,
// safe to call more than once. On DynamoDB another process's writes are
// not heard; a waiter should also re-read on a timer.
func (s *Server) Subscribe(jobID string, onChange func()) (unsubscribe func()) {
	return s.store.Subscribe(jobID, onChange)
}

// Sweep fires everything due: the scheduled sweeper's call.
func (s *Server) Sweep(ctx context.Context) ([]sitestore.Job, error) {
	return s.store.ExpireDue(ctx)
}

// Availability reasons: why no runner can take a job now.
const (
	NoRunnerPaired       = "no-runner-paired"
	NoRunnerOnline       = "no-runner-online"
	NoMatchingCapability = "no-matching-capability"
	AudienceAdmitsNobody = "audience-admits-nobody"
	DefaultUnusable      = "default-unusable"
)

// AvailabilityQuery asks whether a job of this shape could run now.
type AvailabilityQuery struct {
	Kind          string   `json:"kind"`
	Owner         string   `json:"owner"`
	Audience      string   `json:"audience,omitempty"`
	AudienceAllow []string `json:"audienceAllow,omitempty"`
}

// Availability is the answer; Reason only when unavailable.
type Availability struct {
	Available  bool   `json:"available"`
	Reason     string `json:"reason,omitempty"`
	Candidates int    `json:"candidates"`
}

// RunnerAvailability is @byollm/server's runner availability on the direct
// lane, in its order: nobody paired; nobody live (not revoked, heard from
// within LivenessMs); no capability for the kind; nobody admitted (and whose
// side refused); otherwise available.
func (s *Server) RunnerAvailability(ctx context.Context, q AvailabilityQuery) (Availability, error) {
	if s.cloud != nil {
		return Availability{}, ErrCloudLane
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return Availability{}, err
	}
	all, err := s.store.Runners(ctx, "")
	if err != nil {
		return Availability{}, err
	}
	if len(all) == 0 {
		return Availability{Reason: NoRunnerPaired}, nil
	}
	var live []sitestore.Runner
	for _, r := range all {
		if r.RevokedAt == 0 && now-r.LastHeartbeatAt <= s.livenessMs {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return Availability{Reason: NoRunnerOnline}, nil
	}
	audience := q.Audience
	if audience == "" {
		audience = protocol.AudiencePrivate
	}
	capable, admitted := 0, 0
	last := ""
	for _, r := range live {
		for _, c := range r.Capabilities {
			if c.Kind != q.Kind {
				continue
			}
			capable++
			if refusal := sitestore.ServerAdmits(q.Owner, audience, q.AudienceAllow, r.Owner, c); refusal == "" {
				admitted++
			} else {
				last = refusal
			}
		}
	}
	switch {
	case capable == 0:
		return Availability{Reason: NoMatchingCapability}, nil
	case admitted == 0 && sitestore.OwnersDoing(last):
		return Availability{Reason: DefaultUnusable}, nil
	case admitted == 0:
		return Availability{Reason: AudienceAdmitsNobody}, nil
	}
	return Availability{Available: true, Candidates: admitted}, nil
}

// ApprovePairing approves a typed code for the signed-in owner.
func (s *Server) ApprovePairing(ctx context.Context, userCode, owner string) (sitestore.Runner, error) {
	if owner == "" {
		return sitestore.Runner{}, invalid("owner is required")
	}
	r, err := s.store.ApprovePairing(ctx, sitestore.ApproveInput{
		UserCode: sitestore.NormalizeUserCode(userCode),
		Owner:    owner,
		RunnerID: sitestore.NewRunnerID(),
	})
	if isPairingRefusal(err) {
		return sitestore.Runner{}, invalid("%v", err)
	}
	return r, err
}

func isPairingRefusal(err error) bool {
	return errors.Is(err, sitestore.ErrPairingUnknown) || errors.Is(err, sitestore.ErrPairingExpired) ||
		errors.Is(err, sitestore.ErrPairingNotPending)
}

// DenyPairing denies a typed code.
func (s *Server) DenyPairing(ctx context.Context, userCode string) error {
	return s.store.DenyPairing(ctx, sitestore.NormalizeUserCode(userCode))
}

// PendingPairing is what the approval page shows before the user clicks:
// the machine asking, or false if the code is not pending and live.
func (s *Server) PendingPairing(ctx context.Context, userCode string) (sitestore.Pairing, bool, error) {
	p, found, err := s.store.PairingByUserCode(ctx, sitestore.NormalizeUserCode(userCode))
	if err != nil || !found || p.State != sitestore.PairingPending {
		return sitestore.Pairing{}, false, err
	}
	now, err := s.store.Now(ctx)
	if err != nil || p.ExpiresAt <= now {
		return sitestore.Pairing{}, false, err
	}
	return p, true, nil
}

// Runners lists one owner's runners.
func (s *Server) Runners(ctx context.Context, owner string) ([]sitestore.Runner, error) {
	return s.store.Runners(ctx, owner)
}

// RevokeRunner revokes a runner, one way.
func (s *Server) RevokeRunner(ctx context.Context, runnerID string) error {
	return s.store.RevokeRunner(ctx, runnerID)
}
