package sitestore

import (
	"slices"

	"github.com/byorelay/byorelay/protocol"
)

// The rules. Each is a pure function of a job (and what the caller asked)
// to the job it becomes, so that the memory store and the DynamoDB store
// apply one decision and differ only in how they make it atomic.

// DeadlineFor is the job's deadline as a claim stub carries it: the absolute
// deadline, else the end of the TTL window from when it became claimable, or
// from now while it is blocked.
func DeadlineFor(j Job, now int64) int64 {
	if j.DeadlineAt != 0 {
		return j.DeadlineAt
	}
	if j.ClaimableAt != 0 {
		return j.ClaimableAt + j.TTLMs
	}
	return now + j.TTLMs
}

// NewJob is Create's decision for a new id. blocked is whether some
// dependency is not ok (unknown counts as not ok).
func NewJob(in CreateInput, blocked bool, now, defaultTTLMs int64) Job {
	audience := in.Audience
	if audience == "" {
		audience = protocol.AudiencePrivate
	}
	ttl := in.TTLMs
	if ttl == 0 {
		ttl = defaultTTLMs
	}
	j := Job{
		ID:            in.ID,
		Kind:          in.Kind,
		Envelope:      in.Envelope,
		SizeClass:     in.SizeClass,
		Audience:      audience,
		Purpose:       in.Purpose,
		Owner:         in.Owner,
		AudienceAllow: slices.Clone(in.AudienceAllow),
		DependsOn:     dedupe(in.DependsOn),
		State:         StateQueued,
		CreatedAt:     now,
		TTLMs:         ttl,
		DeadlineAt:    in.DeadlineAt,
		RefusedBy:     []string{},
		UpdatedAt:     now,

		AwaitingPublish: in.AwaitingPublish,
		Relayed:         in.AwaitingPublish,
		Streaming:       in.Streaming,
	}
	// The TTL clock starts only once nothing blocks the job: starting it at
	// enqueue would expire a dependent for waiting on a slow dependency.
	if !blocked {
		j.ClaimableAt = now
	}
	return j
}

// CapabilityFor is the first capability in the request that serves kind:
// the one the audience decision judges.
func CapabilityFor(caps []protocol.Capability, kind string) (protocol.Capability, bool) {
	for _, c := range caps {
		if c.Kind == kind {
			return c, true
		}
	}
	return protocol.Capability{}, false
}

// Claimable is the claim predicate, all five guards: queued; claimable and
// not in the future; not refused by this runner; a capability for the kind
// in this request; the server-side audience decision on that capability.
func Claimable(j Job, in ClaimInput, now int64) bool {
	if j.State != StateQueued {
		return false
	}
	if j.ClaimableAt == 0 || j.ClaimableAt > now {
		return false
	}
	if slices.Contains(j.RefusedBy, in.RunnerID) {
		return false
	}
	c, ok := CapabilityFor(in.Capabilities, j.Kind)
	if !ok {
		return false
	}
	return ServerAdmits(j.Owner, j.Audience, j.AudienceAllow, in.RunnerOwner, c) == ""
}

// Grant is a claim of j: a fresh lease per grant, so two claims of one job
// by one runner are two leases a release can tell apart.
func Grant(j Job, runnerID, leaseID string, leaseMs, now int64) Job {
	j.State = StateClaimed
	j.Lease = &protocol.Lease{ID: leaseID, RunnerID: runnerID, ExpiresAt: now + leaseMs}
	j.Attempts++
	j.UpdatedAt = now
	return j
}

// HeldBy reports whether the job's current lease is this site's grant to
// runnerID. An adopted lease names no runner here, so an empty runner id
// holds nothing: were "" allowed to match, anyone naming no runner would
// hold every job a relay leased.
func HeldBy(j Job, runnerID string) bool {
	return runnerID != "" && j.Lease != nil && j.Lease.RunnerID == runnerID
}

// holds reports whether the runner holds the job under exactly this lease.
func holds(j Job, runnerID, leaseID string) bool {
	return HeldBy(j, runnerID) && leaseID != "" && j.Lease.ID == leaseID
}

// heldByHolder is the holder check of CompleteJob, one rule per lane. The
// zero Holder names no lane and holds nothing.
func heldByHolder(j Job, h Holder) bool {
	switch h.lane {
	case laneLease:
		// The grant and its runner: the reference checks the lease id
		// alone, which lets whoever learns a lease id write another
		// runner's result. A relay's (adopted) lease names no runner, so
		// it is never held here: the direct lane sent nobody its payload,
		// and the cloud lane completes it by the device it was sealed to.
		return holds(j, h.runnerID, h.leaseID)
	case laneRunner:
		return HeldBy(j, h.runnerID)
	case laneDevice:
		// The cloud lane: the payload post names no lease, so a seal can
		// land on a newer lease than the one the site read; what proves the
		// work is this site's is the device it sealed to, whose signature
		// the caller has checked.
		return h.device.Identity != "" && slices.Contains(j.SealedTo, h.device)
	}
	return false
}

// Renew extends a lease the runner holds on a claimed or running job; false
// when the grant is lost (reclaimed, terminal, or another grant).
func Renew(j Job, runnerID, leaseID string, leaseMs, now int64) (Job, bool) {
	if !holds(j, runnerID, leaseID) || (j.State != StateClaimed && j.State != StateRunning) {
		return j, false
	}
	lease := *j.Lease
	lease.ExpiresAt = now + leaseMs
	j.Lease = &lease
	j.State = StateRunning
	j.UpdatedAt = now
	return j, true
}

// Adopt records a relay's lease. Only a job that is genuinely available
// can be adopted: a terminal or otherwise-leased job means the relay and
// this store disagree, and the row is not the place to settle it.
func Adopt(j Job, leaseID string, expiresAt, now int64) (Job, bool) {
	// A lease with no id would be held by any release, renewal or result
	// that names none.
	if leaseID == "" {
		return j, false
	}
	if j.State != StateQueued && j.State != StateClaimed {
		return j, false
	}
	if j.Lease != nil && j.Lease.ID != leaseID {
		return j, false
	}
	j.State = StateClaimed
	j.Lease = &protocol.Lease{ID: leaseID, RunnerID: "", ExpiresAt: expiresAt}
	j.UpdatedAt = now
	return j, true
}

// MarkPublished is the relay's acceptance of the stub.
func MarkPublished(j Job, now int64) (Job, bool) {
	if !j.AwaitingPublish {
		return j, false
	}
	j.AwaitingPublish = false
	j.UpdatedAt = now
	return j, true
}

// SealTo is the cloud lane's adopt, written before the sealed payload
// leaves the site (write-ahead: a result from that device is accepted
// after a restart). Unlike Adopt it replaces an earlier adopted lease: the
// relay owns leases, and a device re-claiming after the awaiting window
// lapsed holds a new one; the result is still accepted only from a device
// in SealedTo. Refused for a job that is finished, expired, cancelled
// (sealing is the irreversible half: once the ciphertext is out a device
// can run it), past its deadline, held by one of this site's own runners,
// or whose roster does not admit the claiming device (AdmitsDevice: the
// seal is the only gate the cloud lane has). A lease with no id or a
// device with no identity is refused: the device would then be one any
// result naming none matches. Each new grant sealed counts one attempt, as
// each grant does on the direct lane; sealing the same grant again does
// not.
func SealTo(j Job, in SealToInput, now int64) (Job, bool) {
	if in.LeaseID == "" || in.Device.Identity == "" {
		return j, false
	}
	if j.State != StateQueued && j.State != StateClaimed && j.State != StateRunning {
		return j, false
	}
	if j.CancelRequested || (j.Lease != nil && !j.Adopted()) {
		return j, false
	}
	if DeadlineFor(j, now) <= now {
		// A sealed job waits past its deadline for a result the relay may
		// have accepted before it (expiryCut); nobody may start it now.
		return j, false
	}
	if !AdmitsDevice(j, in.RunnerID, in.Device) {
		return j, false
	}
	if j.State == StateQueued {
		j.State = StateClaimed
	}
	if j.Lease == nil || j.Lease.ID != in.LeaseID {
		j.Attempts++
	}
	j.Lease = &protocol.Lease{ID: in.LeaseID, RunnerID: "", ExpiresAt: in.ExpiresAt}
	if !slices.Contains(j.SealedTo, in.Device) {
		j.SealedTo = append(slices.Clone(j.SealedTo), in.Device)
	}
	// The stream is keyed to the grant the payload was last sealed under:
	// a device re-claiming under a new lease streams under that one.
	j.StreamGrant = &StreamGrant{LeaseID: in.LeaseID, Device: in.Device}
	j.UpdatedAt = now
	return j, true
}

// AdmitsDevice is the cloud lane's roster decision: a job with no
// AudienceAllow admits every device the relay grants it; one with a roster
// admits a device the roster names by the runner id the relay reports for
// the claim or by the device's identity key id. The relay's pending list
// names the claiming device and runner, never their owner, so a cloud-lane
// roster names devices where the direct lane's names owners
// (ServerAdmits); the relay never sees the roster, so the site's seal is
// where it holds (docs/decisions/0022-cloud-lane-jobs.md).
func AdmitsDevice(j Job, runnerID string, device protocol.PublicIdentity) bool {
	if len(j.AudienceAllow) == 0 {
		return true
	}
	if runnerID != "" && slices.Contains(j.AudienceAllow, runnerID) {
		return true
	}
	keyID, err := protocol.KeyID(device.Identity)
	return err == nil && slices.Contains(j.AudienceAllow, keyID)
}

// EndJob ends a live job without a result a device signed: the relay
// evicted it, it holds a result this site cannot accept, or a device
// answered a cancel before it was sent anything. The state is the
// outcome's (error unless canceled). A finished or expired job keeps its
// end: a job ends once.
func EndJob(j Job, outcome protocol.Outcome, reason string, now int64) (Job, bool) {
	if j.Terminal() || j.State == StateExpired {
		return j, false
	}
	j.State = StateError
	if outcome.Outcome == StateCanceled {
		j.State = StateCanceled
	}
	j.Lease = nil
	j.CancelRequested = false
	j.AwaitingPublish = false
	o := outcome
	j.Outcome = &o
	j.EndReason = reason
	j.UpdatedAt = now
	return j, true
}

// PastDeadline reports whether a job's absolute deadline (DeadlineAt, the
// creator's bound) has passed: at or before now, or, for a job sealed to a
// device, before the cut expiryCut allows while the relay may still list a
// result accepted in the deadline's last instant. Such a job takes no result
// and expires at the next sweep, whoever holds it. The TTL window is not an
// absolute deadline: it bounds waiting in the queue, and time spent being
// worked on does not count toward it.
func PastDeadline(j Job, now int64) bool {
	return j.DeadlineAt != 0 && j.DeadlineAt <= expiryCut(j, now, 0)
}

// CompleteJob is Complete's decision, in the reference's order:
//  1. terminal is tested before the holder, and answered duplicate only to
//     the same device under the same grant (anyone else gets the plain
//     refusal they would get for a live job: a job id is not a terminality
//     probe);
//  2. past its absolute deadline (PastDeadline) the result is refused as
//     the relay refuses it (PastDeadline in the result) and a live job
//     expires in the same write;
//  3. expired refuses;
//  4. the holder must hold the job (heldByHolder: its lane's rule; the zero
//     Holder holds nothing);
//  5. otherwise the outcome is recorded, the lease dropped, the grant kept
//     in CompletedByLeaseID and any cancel request dropped.
//
// changed is whether the job must be written.
func CompleteJob(j Job, in CompleteInput, now int64) (out Job, res CompleteResult, changed bool) {
	if j.Terminal() {
		// Neither half matches on "": a caller naming no runner and no
		// lease is nobody's replay.
		sameDevice := in.RunnerID != "" && j.Provenance != nil && j.Provenance.RunnerID == in.RunnerID
		sameGrant := in.Holder.lane == laneLease && in.Holder.leaseID != "" && j.CompletedByLeaseID == in.Holder.leaseID
		jj := j
		return j, CompleteResult{Duplicate: sameDevice && sameGrant, Job: &jj}, false
	}
	if PastDeadline(j, now) {
		// The relay's word for a result after the deadline: the job is
		// gone, swept or not. A live job ends here in the same write, as
		// the next sweep would end it.
		changed := j.State != StateExpired
		if changed {
			j = expire(j, now)
		}
		jj := j
		return j, CompleteResult{PastDeadline: true, Job: &jj}, changed
	}
	if j.State == StateExpired {
		jj := j
		return j, CompleteResult{Job: &jj}, false
	}
	held := heldByHolder(j, in.Holder)
	if !held {
		jj := j
		return j, CompleteResult{Job: &jj}, false
	}
	switch in.Outcome.Outcome {
	case StateOK:
		j.State = StateOK
	case StateCanceled:
		j.State = StateCanceled
	default:
		j.State = StateError
	}
	if in.Holder.lane == laneRunner {
		j.CompletedByLeaseID = j.Lease.ID
	} else {
		j.CompletedByLeaseID = in.Holder.leaseID
	}
	j.Lease = nil
	outcome := in.Outcome
	prov := in.Provenance
	j.Outcome = &outcome
	if in.Answer != nil {
		a := *in.Answer
		j.Answer = &a
	}
	j.Provenance = &prov
	j.CancelRequested = false
	j.AwaitingPublish = false
	j.UpdatedAt = now
	jj := j
	return j, CompleteResult{Accepted: true, Job: &jj}, true
}

// Release requeues a grant the runner holds under exactly this lease: the
// grant, not just its holder, or a replayed release of an earlier lease
// drops a later one while the daemon is still running it. The TTL clock
// restarts; a refusal is remembered so the pair does not spin.
func Release(j Job, runnerID, leaseID, reason string, now int64) (Job, bool) {
	if !holds(j, runnerID, leaseID) {
		return j, false
	}
	j.State = StateQueued
	j.Lease = nil
	j.CompletedByLeaseID = ""
	j.ClaimableAt = now
	if reason == protocol.ReasonRefused && !slices.Contains(j.RefusedBy, runnerID) {
		j.RefusedBy = append(slices.Clone(j.RefusedBy), runnerID)
	}
	j.UpdatedAt = now
	return j, true
}

// ExpireJob is one job's share of expireDue(now), in the reference's order:
//  1. a held job whose own (not adopted) lease has lapsed is requeued with
//     the TTL clock restarted: time spent being worked on does not count
//     toward expiry, so a dead runner's job is offered again, not expired;
//  2. an adopted lease past deadlineFor expires (a relay's lease is
//     not this site's to lapse, but the deadline still bounds it);
//  3. a job this site's runner holds, under a live lease, expires past its
//     absolute deadline (PastDeadline): a daemon that keeps heartbeating
//     does not keep a job alive past the bound its creator set;
//  4. a queued job past its deadline, or past ClaimableAt+TTL, expires. A
//     blocked job (ClaimableAt 0) never expires by TTL.
//
// "Past" is now, except for a job sealed to a device (expiryCut).
func ExpireJob(j Job, now int64) (Job, bool) { return ExpireJobBefore(j, now, 0) }

// ExpireJobBefore is ExpireJob with the cloud pump's word on sealed jobs:
// a job sealed to a device expires once its deadline is at or before
// sealedBefore (expiryCut).
func ExpireJobBefore(j Job, now, sealedBefore int64) (Job, bool) {
	changed := false
	held := j.State == StateClaimed || j.State == StateRunning
	if held && j.Lease != nil && !j.Adopted() && j.Lease.ExpiresAt <= now {
		j.State = StateQueued
		j.Lease = nil
		j.CompletedByLeaseID = ""
		j.ClaimableAt = now
		j.UpdatedAt = now
		changed = true
	}
	cut := expiryCut(j, now, sealedBefore)
	if (j.State == StateClaimed || j.State == StateRunning) && j.Adopted() && DeadlineFor(j, now) <= cut {
		return expire(j, now), true
	}
	if (j.State == StateClaimed || j.State == StateRunning) && !j.Adopted() && j.DeadlineAt != 0 && j.DeadlineAt <= cut {
		return expire(j, now), true
	}
	if j.State == StateQueued {
		pastDeadline := j.DeadlineAt != 0 && j.DeadlineAt <= cut
		pastTTL := j.ClaimableAt != 0 && j.ClaimableAt+j.TTLMs <= cut
		if pastDeadline || pastTTL {
			return expire(j, now), true
		}
	}
	return j, changed
}

// expiryCut is the one decision of when a job may expire: the instant its
// deadline must be at or before. For every job but one sealed to a device
// that is now. A job sealed to a device (only the cloud lane seals) may
// have a result the relay accepted in the deadline's last instant, after
// the site's latest results poll; the relay lists it for
// protocol.ResultGraceMs past the deadline, and the site hears of it only
// at its next poll. So such a job expires once the cloud pump says a poll
// sent late enough was answered without its result (sealedBefore:
// client/site's expiryBefore, by this store's clock), and, whatever it
// says, once the grace has passed, after which no relay lists the result.
// Never before the deadline.
func expiryCut(j Job, now, sealedBefore int64) int64 {
	if len(j.SealedTo) == 0 {
		return now
	}
	return min(now, max(sealedBefore, now-protocol.ResultGraceMs))
}

func expire(j Job, now int64) Job {
	j.State = StateExpired
	j.Lease = nil
	j.CompletedByLeaseID = ""
	j.UpdatedAt = now
	return j
}

// DueAt is the first instant at which ExpireJob would change the job, 0 if
// nothing ever will on its own (terminal, or blocked with no deadline). A
// store that indexes due work keys it on this; ExpireJob stays the judge.
func DueAt(j Job) int64 {
	switch j.State {
	case StateClaimed, StateRunning:
		if j.Lease == nil {
			return 0
		}
		if j.Adopted() {
			// deadlineFor with the claimableAt fallback; a blocked adopted
			// job (no claimableAt, no deadline) has a deadline that moves
			// with now, so it is due at once and ExpireJob decides.
			if j.DeadlineAt == 0 && j.ClaimableAt == 0 {
				return 1
			}
			return DeadlineFor(j, 0) + sealedGrace(j)
		}
		if j.DeadlineAt != 0 && j.DeadlineAt < j.Lease.ExpiresAt {
			return j.DeadlineAt + sealedGrace(j)
		}
		return j.Lease.ExpiresAt
	case StateQueued:
		due := int64(0)
		if j.ClaimableAt != 0 {
			due = j.ClaimableAt + j.TTLMs
		}
		if j.DeadlineAt != 0 && (due == 0 || j.DeadlineAt < due) {
			due = j.DeadlineAt
		}
		if due == 0 {
			return 0
		}
		return due + sealedGrace(j)
	}
	return 0
}

// RetainedUntil is when an ended job's record, its sealed answer with it,
// is deleted: retentionMs after it ended (its last write, the ending one);
// 0 while the job is live. A store deletes it at or after this instant
// (the memory store at its next sweep, DynamoDB by its TTL).
func RetainedUntil(j Job, retentionMs int64) int64 {
	if !j.Ended() {
		return 0
	}
	return j.UpdatedAt + retentionMs
}

// sealedGrace is how long after its deadline a sweep leaves a job
// (expiryCut): the grace for one sealed to a device, else nothing. A cloud
// pump that may expire it sooner reads the due work up to its own cut plus
// this.
func sealedGrace(j Job) int64 {
	if len(j.SealedTo) > 0 {
		return protocol.ResultGraceMs
	}
	return 0
}

// Cancel is the app's cancel: a queued job is cancelled at once; a held one
// gets a cancel request its holder hears about at the next heartbeat and
// answers by reporting canceled itself; a finished one is left alone.
func Cancel(j Job, now int64) (Job, bool) {
	switch j.State {
	case StateQueued:
		j.State = StateCanceled
		j.Lease = nil
		j.CompletedByLeaseID = ""
		j.UpdatedAt = now
		return j, true
	case StateClaimed, StateRunning:
		if j.CancelRequested {
			return j, false
		}
		j.CancelRequested = true
		return j, true
	}
	return j, false
}

// Unblock starts the TTL clock of a blocked job whose dependencies are now
// all ok; depOK reports one dependency's state. Only ok unblocks: a
// dependency that ended in error leaves its dependents blocked for good
// rather than running them on an input that never arrived.
func Unblock(j Job, depOK func(id string) bool, now int64) (Job, bool) {
	if j.ClaimableAt != 0 {
		return j, false
	}
	for _, d := range j.DependsOn {
		if !depOK(d) {
			return j, false
		}
	}
	j.ClaimableAt = now
	j.UpdatedAt = now
	return j, true
}

// CancelRequestOf is the grant a cancel request names for runnerID, if the
// job's current lease is that runner's.
func CancelRequestOf(j Job, runnerID string) (protocol.GrantRef, bool) {
	if !j.CancelRequested || !HeldBy(j, runnerID) {
		return protocol.GrantRef{}, false
	}
	return protocol.GrantRef{JobID: j.ID, LeaseID: j.Lease.ID}, true
}

// ApprovePairing is approval's decision: the pairing must exist, be
// unexpired and pending. The runner is the machine the user saw.
func ApprovePairing(p Pairing, in ApproveInput, now int64) (Pairing, Runner, error) {
	if p.ExpiresAt <= now {
		return p, Runner{}, ErrPairingExpired
	}
	if p.State != PairingPending {
		return p, Runner{}, ErrPairingNotPending
	}
	r := Runner{
		ID:              in.RunnerID,
		Owner:           in.Owner,
		Label:           p.Label,
		Platform:        p.Platform,
		DaemonVersion:   p.DaemonVersion,
		Capabilities:    slices.Clone(p.Capabilities),
		LastHeartbeatAt: now,
		CreatedAt:       now,
		Device:          p.Device,
	}
	p.State = PairingApproved
	p.Owner = in.Owner
	p.RunnerID = r.ID
	p.Collected = false
	return p, r, nil
}

func dedupe(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
