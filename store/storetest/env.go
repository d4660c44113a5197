package storetest

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// site is the control-plane site id the cases route under.
const site = "site_store"

// siteKeyID is a site identity key id as it appears in JobStub.site.
const siteKeyID = "BYOLLM-TEST-SITE-KEY-ID"

// farDeadline is 2100-01-01: a deadline no case reaches unless it means to.
const farDeadline int64 = 4_102_444_800_000

// env is one case's world: a fresh store, its clock, and what it reported.
type env struct {
	*testing.T
	h     Harness
	ctx   context.Context
	clock *clock.Manual
	s     Store
	churn *churnLog
}

type churnLog struct {
	mu      sync.Mutex
	reports []store.UnsealedChurn
}

func (c *churnLog) add(r store.UnsealedChurn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, r)
}

func (c *churnLog) all() []store.UnsealedChurn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

func newEnv(t *testing.T, h Harness) *env {
	e := &env{T: t, h: h, ctx: context.Background(), churn: &churnLog{}}
	e.clock = clock.NewManual(Start)
	e.s = h.New(t, store.Options{Clock: e.clock, OnChurn: e.churn.add})
	return e
}

// rebuild replaces the case's store with a fresh one built with opts (the
// clock is always the case's own).
func (e *env) rebuild(opts store.Options) {
	e.Helper()
	opts.Clock = e.clock
	e.s = e.h.New(e.T, opts)
}

func (e *env) advance(ms int64) { e.clock.Advance(time.Duration(ms) * time.Millisecond) }

func (e *env) nowMs() int64 {
	e.Helper()
	now, err := e.s.Now(e.ctx)
	e.check(err)
	return now
}

func (e *env) check(err error) {
	e.Helper()
	if err != nil {
		e.Fatalf("store error: %v", err)
	}
}

// stub is a private llm.generate job for owner, far from its deadline.
func stub(id, owner string) protocol.JobStub {
	return protocol.JobStub{
		ID:         id,
		Kind:       "llm.generate",
		Owner:      owner,
		Site:       siteKeyID,
		Audience:   "private",
		SizeClass:  "small",
		Streaming:  false,
		DeadlineAt: farDeadline,
	}
}

// device is an opaque public identity: the store never verifies or opens
// keys, it only keeps and returns them, so distinct strings are enough.
func device(name string) protocol.PublicIdentity {
	return protocol.PublicIdentity{
		Identity:      "id-" + name,
		Encryption:    "enc-" + name,
		EncryptionSig: "sig-" + name,
	}
}

var envelope = protocol.SealedEnvelope{
	Ciphertext:     "AAAA",
	RecipientKeyID: "r",
	SenderKeyID:    "s",
	Direction:      "payload",
	DeadlineAt:     farDeadline,
}

func resultEnvelope(ciphertext string) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{
		Ciphertext:     ciphertext,
		RecipientKeyID: "site",
		SenderKeyID:    "device",
		Direction:      "result",
		DeadlineAt:     farDeadline,
	}
}

// claimArgs is runner_1, owned by alice, serving llm.generate for alice on
// site; edit the result for other cases.
func claimArgs() store.ClaimInput {
	return store.ClaimInput{
		RunnerID: "runner_1",
		Owner:    "alice",
		Device:   device("runner_1"),
		Routes:   []store.Route{{SiteID: site, Owner: "alice"}},
		Kinds:    []string{"llm.generate"},
		Max:      10,
		LeaseMs:  60_000,
	}
}

// asRunner is claimArgs for another device of alice's.
func asRunner(runnerID string) store.ClaimInput {
	in := claimArgs()
	in.RunnerID = runnerID
	in.Device = device(runnerID)
	return in
}

func (e *env) enqueue(siteID string, s protocol.JobStub) store.Job {
	e.Helper()
	job, err := e.s.Enqueue(e.ctx, store.EnqueueInput{ID: s.ID, SiteID: siteID, Stub: s})
	e.check(err)
	return job
}

func (e *env) claim(in store.ClaimInput) []store.Claimed {
	e.Helper()
	granted, err := e.s.Claim(e.ctx, in)
	e.check(err)
	return granted
}

// claimOne claims with in and requires exactly one grant, of jobID.
func (e *env) claimOne(in store.ClaimInput, jobID string) store.Claimed {
	e.Helper()
	granted := e.claim(in)
	if got := ids(granted); !reflect.DeepEqual(got, []string{jobID}) {
		e.Fatalf("claim granted %q, want [%s]", got, jobID)
	}
	return granted[0]
}

func (e *env) job(siteID, jobID string) (store.Job, bool) {
	e.Helper()
	job, ok, err := e.s.Job(e.ctx, siteID, jobID)
	e.check(err)
	return job, ok
}

func (e *env) mustJob(siteID, jobID string) store.Job {
	e.Helper()
	job, ok := e.job(siteID, jobID)
	if !ok {
		e.Fatalf("job (%s, %s) is absent", siteID, jobID)
	}
	return job
}

func (e *env) wantAbsent(siteID, jobID string) {
	e.Helper()
	if job, ok := e.job(siteID, jobID); ok {
		e.Fatalf("job (%s, %s) is still held: %+v", siteID, jobID, job)
	}
}

func (e *env) wantState(siteID, jobID string, want store.State) {
	e.Helper()
	if got := e.mustJob(siteID, jobID).State; got != want {
		e.Fatalf("job (%s, %s) is %q, want %q", siteID, jobID, got, want)
	}
}

func (e *env) seal(jobID string) store.SealResult {
	e.Helper()
	res, err := e.s.Seal(e.ctx, store.SealInput{SiteID: site, JobID: jobID, Envelope: envelope})
	e.check(err)
	return res
}

func (e *env) take(jobID, runnerID, leaseID string) store.PayloadResult {
	e.Helper()
	res, err := e.s.TakePayload(e.ctx, store.HolderInput{JobID: jobID, RunnerID: runnerID, LeaseID: leaseID})
	e.check(err)
	return res
}

func (e *env) complete(jobID, runnerID, leaseID, ciphertext string, d store.Disposition) store.CompleteResult {
	e.Helper()
	res, err := e.s.Complete(e.ctx, store.CompleteInput{
		JobID: jobID, RunnerID: runnerID, LeaseID: leaseID,
		Envelope: resultEnvelope(ciphertext), Disposition: d,
	})
	e.check(err)
	return res
}

func (e *env) release(runnerID string, reason store.ReleaseReason, retryAfter int64, grants ...protocol.GrantRef) []string {
	e.Helper()
	released, err := e.s.ReleaseLeases(e.ctx, store.ReleaseInput{
		RunnerID: runnerID, Leases: grants, Reason: reason, RetryAfter: retryAfter,
	})
	e.check(err)
	return released
}

func (e *env) sweep() store.SweepResult {
	e.Helper()
	res, err := e.s.Sweep(e.ctx)
	e.check(err)
	return res
}

func grant(c store.Claimed) protocol.GrantRef {
	return protocol.GrantRef{JobID: c.ID, LeaseID: c.Lease.ID}
}

func ids(granted []store.Claimed) []string {
	out := []string{}
	for _, g := range granted {
		out = append(out, g.ID)
	}
	return out
}

func jobIDs(jobs []store.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// same fails unless got and want are deeply equal.
func (e *env) same(what string, got, want any) {
	e.Helper()
	if !reflect.DeepEqual(got, want) {
		e.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// normal is a job with absent collections spelled one way, so implementations
// may return nil or empty for "none" and still compare equal.
func normal(j store.Job) store.Job {
	if len(j.RefusedBy) == 0 {
		j.RefusedBy = nil
	}
	if len(j.RetryAfter) == 0 {
		j.RetryAfter = nil
	}
	return j
}

func (e *env) sameJob(what string, got, want store.Job) {
	e.Helper()
	e.same(what, normal(got), normal(want))
}
