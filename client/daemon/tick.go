package daemon

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Tick is one heartbeat-and-claim cycle: renew held leases, apply the
// relay's site set, stop cancelled and lost work, then claim up to the free
// concurrency. Claimed jobs run in their own goroutines; Tick does not wait
// for them. It returns how many jobs it claimed.
func (d *Daemon) Tick(ctx context.Context) (int, error) {
	d.tickMu.Lock()
	defer d.tickMu.Unlock()
	if err := d.heartbeat(ctx); err != nil {
		return 0, err
	}
	return d.claim(ctx)
}

// heartbeat renews the held leases and applies what the relay says.
func (d *Daemon) heartbeat(ctx context.Context) error {
	d.mu.Lock()
	runnerID, revoked := d.pairing.RunnerID, d.revoked
	leases := make([]protocol.GrantRef, 0, len(d.active))
	for leaseID, h := range d.active {
		leases = append(leases, protocol.GrantRef{JobID: h.jobID, LeaseID: leaseID})
	}
	d.mu.Unlock()
	switch {
	case revoked:
		return ErrRevoked
	case runnerID == "":
		return ErrNotPaired
	}

	beganAt := d.clock.Now()
	var hb protocol.HeartbeatResponse
	err := d.post(ctx, "heartbeat", protocol.HeartbeatRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: runnerID, DaemonVersion: d.version,
		Capabilities: d.capabilities, Withheld: []protocol.WithheldKind{}, ActiveLeases: leases,
	}, &hb, true)
	if err != nil {
		return d.checkRevoked(err)
	}
	d.mu.Lock()
	d.lastBeat = beganAt
	d.mu.Unlock()
	d.applySites(hb.Sites, hb.Successions)
	for _, g := range hb.Lost {
		// A job the relay says we lost is abandoned, not finished: someone
		// else may hold it now.
		if d.stop(g.LeaseID, errLost) {
			d.emit(Event{Type: EventLost, JobID: g.JobID})
		}
	}
	for _, g := range hb.Cancel {
		if d.stop(g.LeaseID, errCancelledBySite) {
			d.emit(Event{Type: EventCancelled, JobID: g.JobID})
		}
	}
	// Not revocation: an empty set is "serving nothing", and the claim
	// still goes out, because only a `revoked` refusal ends a pairing. Said
	// once per change, not on every beat.
	d.mu.Lock()
	changed := d.servingNothing != (len(hb.Sites) == 0)
	d.servingNothing = len(hb.Sites) == 0
	d.mu.Unlock()
	if changed && len(hb.Sites) == 0 {
		d.emit(Event{Type: EventServingNothing})
	}
	return nil
}

// claim asks for up to the free concurrency and starts each job.
func (d *Daemon) claim(ctx context.Context) (int, error) {
	d.mu.Lock()
	runnerID, revoked, stopping := d.pairing.RunnerID, d.revoked, d.stopping
	// The schema caps one claim at 64 jobs.
	free := min(d.concurrency-len(d.active), protocol.MaxClaim)
	d.mu.Unlock()
	switch {
	case revoked:
		return 0, ErrRevoked
	case runnerID == "":
		return 0, ErrNotPaired
	case stopping || free <= 0:
		return 0, nil
	}
	var claimed protocol.ClaimResponse
	err := d.post(ctx, "claim", protocol.ClaimRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: runnerID, Capabilities: d.capabilities, Max: int64(free),
	}, &claimed, true)
	if err != nil {
		return 0, d.checkRevoked(err)
	}
	for _, job := range claimed.Jobs {
		jobCtx, cancel := context.WithCancelCause(d.life)
		d.mu.Lock()
		// Held from the claim on, so heartbeats renew the lease while the
		// payload is awaited and a cancel reaches the job at any stage.
		d.active[job.Lease.ID] = &held{jobID: job.ID, site: job.Site, cancel: cancel}
		d.jobs.Add(1)
		d.mu.Unlock()
		d.emit(Event{Type: EventClaimed, JobID: job.ID, Site: job.Site, Detail: job.Kind})
		go func() {
			defer d.jobs.Done()
			defer d.settle(job.Lease.ID, cancel)
			d.handle(jobCtx, job)
		}()
	}
	return len(claimed.Jobs), nil
}

// runTick is Run's cycle: a full Tick, except right after taking work
// while the last heartbeat is still recent, when it only claims. Leases
// are renewed only by heartbeats, so one goes out at least every half
// interval; in between, a busy device asks for work without paying for a
// heartbeat (and a sweep) on every claim.
func (d *Daemon) runTick(ctx context.Context, step int) (int, error) {
	d.mu.Lock()
	recent := !d.lastBeat.IsZero() && d.clock.Now().Sub(d.lastBeat) < d.interval/2
	d.mu.Unlock()
	if step != 0 || !recent {
		return d.Tick(ctx)
	}
	d.tickMu.Lock()
	defer d.tickMu.Unlock()
	return d.claim(ctx)
}

// Run ticks until ctx ends or the device is revoked, polling faster right
// after it took work (the reference's poll ladder) and at most
// HeartbeatInterval apart. It does not release anything when ctx ends:
// call Shutdown for that.
func (d *Daemon) Run(ctx context.Context) error {
	step := 0
	for ctx.Err() == nil {
		claimed, err := d.runTick(ctx, step)
		var wait time.Duration
		switch {
		case errors.Is(err, ErrRevoked), errors.Is(err, ErrNotPaired):
			return err
		case err != nil && ctx.Err() == nil:
			d.emit(Event{Type: EventError, Detail: err.Error()})
			wait = d.interval
			var ce *CallError
			if errors.As(err, &ce) && ce.RetryAfter > 0 {
				wait = ce.RetryAfter
			}
		default:
			step = nextRung(step, claimed)
			wait = pollDelay(step, d.interval)
		}
		if d.sleep(ctx, wait) != nil {
			break
		}
	}
	return ctx.Err()
}

// pollLadder is fractions of the heartbeat interval: right after a claim
// the next poll comes almost at once (a chat's next message is likely for
// this device), then backs off to the full interval.
var pollLadder = []float64{0, 0.1, 0.2, 0.4, 0.6, 0.8, 1}

func nextRung(step, claimed int) int {
	if claimed > 0 {
		return 0
	}
	return min(step+1, len(pollLadder)-1)
}

// pollDelay adds jitter so two devices racing for the same job tie by
// luck, not by clock speed.
func pollDelay(step int, interval time.Duration) time.Duration {
	rung := pollLadder[step]
	if rung == 1 {
		return time.Duration(float64(interval) * (0.85 + rand.Float64()*0.3))
	}
	jitter := time.Duration(float64(interval) * (0.02 + rand.Float64()*0.03))
	return time.Duration(float64(interval)*rung) + jitter
}
