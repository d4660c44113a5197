// Package sitepump is the cloud lane's pump as a function: one invocation
// publishes, seals and collects (siteserver.Server.Run) while the site has
// work, and only then. It holds the site's one pump lease in the site
// table while it runs, stops when no job is waiting to be published or in
// flight at the relay, hands over to a successor before its time budget
// ends, and keeps one one-time wake-up pending a minute ahead while a pump
// holds the lease, so that a pump that dies is replaced
// (docs/decisions/0030-site-pump.md).
//
// Every step it cannot take back is the site store's (the ledger
// siteserver keeps for client/site): a pump killed at any instant leaves
// nothing a successor cannot pick up from the store and the relay.
package sitepump

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
)

// Triggers, as Event.Trigger names them.
const (
	// TriggerEnqueue: the app function started it after storing a job.
	TriggerEnqueue = "enqueue"
	// TriggerWakeup: the one-time wake-up a running pump armed.
	TriggerWakeup = "wakeup"
	// TriggerHandover: a pump whose budget ran out passed it the lease.
	TriggerHandover = "handover"
	// TriggerInvoke: an operator ran it by hand.
	TriggerInvoke = "invoke"
)

// Event is the pump's invocation payload.
type Event struct {
	Trigger string `json:"trigger"`
	// Holder is the lease a hand-over passed (TriggerHandover only).
	Holder string `json:"holder,omitempty"`
}

// Store is what the pump reads and writes besides what the server does:
// its work and its lease (sitedynamo.Store).
type Store interface {
	Now(ctx context.Context) (int64, error)
	Work(ctx context.Context) (sitedynamo.Work, error)
	PumpLeaseNow(ctx context.Context) (sitedynamo.PumpLease, bool, error)
	TakePumpLease(ctx context.Context, holder string, ttlMs int64) (bool, error)
	PassPumpLease(ctx context.Context, holder, successor string, ttlMs int64) (bool, error)
	DropPumpLease(ctx context.Context, holder string) error
	ClaimPumpWake(ctx context.Context, wakeAt, now int64) (bool, error)
	ForgetPumpWake(ctx context.Context, wakeAt int64) error
}

// Runner is the cloud lane's loop (siteserver.Server.Run).
type Runner interface {
	Run(ctx context.Context, every time.Duration, deliver func(site.Report)) error
}

// Starter starts a pump invocation without waiting for it (an
// asynchronous Lambda invoke of the pump function).
type Starter interface {
	Start(ctx context.Context, ev Event) error
}

// Waker arms a one-time wake-up that invokes the pump with TriggerWakeup
// at or shortly after at (an EventBridge Scheduler at() schedule).
type Waker interface {
	Wake(ctx context.Context, at time.Time) error
}

// Defaults.
const (
	// DefaultEvery is the cadence of both halves of the loop and of the
	// lease's renewal: a claim is seen within it and sealed well inside the
	// relay's 10 s awaiting window.
	DefaultEvery = 2 * time.Second
	// DefaultLeaseTTL is how long the lease holds unrenewed. Short: a pump
	// that dies blocks its replacement for at most this long, which must
	// leave a claim made just before the death time to be sealed inside
	// its awaiting window.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultBudget is how long one invocation pumps before it hands over,
	// when the function's own deadline is later.
	DefaultBudget = 10 * time.Minute
	// DefaultWakeAfter is how far ahead the wake-up is armed: Scheduler's
	// precision, and the shortest timer the pump leaves running.
	DefaultWakeAfter = time.Minute
	// reserve is what the pump leaves itself before its function's
	// deadline to stop its loop, pass the lease and start its successor.
	reserve = 10 * time.Second
)

// Config wires a pump.
type Config struct {
	Store Store
	// Server builds (or returns) the cloud-lane server; called once per
	// invocation that takes the lease, so a pump that finds nothing to do
	// never reads the site's keys.
	Server  func(ctx context.Context) (Runner, error)
	Starter Starter
	Waker   Waker
	// Every, LeaseTTL, Budget and WakeAfter: 0 is the default.
	Every     time.Duration
	LeaseTTL  time.Duration
	Budget    time.Duration
	WakeAfter time.Duration
	Logger    *slog.Logger
	// OnCycle, when set, hears each cycle's figures (the metrics).
	OnCycle func(Cycle)
}

// Cycle is one supervisor cycle's figures.
type Cycle struct {
	// LagMs is how long the oldest job waiting to be published has waited
	// (0 if none): the pump's lag.
	LagMs int64
	// Late is how many seals the relay refused as too late since the last
	// cycle.
	Late int
}

// Report is what one invocation did.
type Report struct {
	Trigger string `json:"trigger"`
	// Pumped says it held the lease and ran the loop.
	Pumped bool `json:"pumped"`
	// Stopped says why it returned.
	Stopped string `json:"stopped"`
	Sealed  int    `json:"sealed"`
	Ended   int    `json:"ended"`
	Late    int    `json:"late"`
	// Successor is the lease passed on a hand-over.
	Successor string `json:"successor,omitempty"`
}

// Why a pump returns.
const (
	StoppedIdle       = "idle: no job waits to be published or is in flight"
	StoppedHeld       = "another pump holds the lease"
	StoppedLeaseLost  = "the lease passed to another pump"
	StoppedHandedOver = "budget spent; handed over to a successor"
	StoppedCancelled  = "the invocation ended"
)

// Pump is one container's pump.
type Pump struct {
	cfg Config
	log *slog.Logger
}

// New builds a pump.
func New(cfg Config) (*Pump, error) {
	if cfg.Store == nil || cfg.Server == nil || cfg.Starter == nil || cfg.Waker == nil {
		return nil, errors.New("sitepump: Config needs Store, Server, Starter and Waker")
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseTTL < 2*cfg.Every {
		return nil, fmt.Errorf("sitepump: a lease of %v lapses between renewals every %v", cfg.LeaseTTL, cfg.Every)
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.WakeAfter <= 0 {
		cfg.WakeAfter = DefaultWakeAfter
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pump{cfg: cfg, log: log}, nil
}

// NewHolder is a fresh lease holder id.
func NewHolder() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "pump-" + hex.EncodeToString(b[:])
}

// Handle is one invocation: take the lease (or leave at once if a live pump
// holds it, or if there is no work), pump until idle, the budget, or the
// lease is lost, and answer what it did.
func (p *Pump) Handle(ctx context.Context, ev Event) (Report, error) {
	rep := Report{Trigger: ev.Trigger}
	holder, ok, err := p.take(ctx, ev)
	if err != nil || !ok {
		if err == nil && rep.Stopped == "" {
			rep.Stopped = holderStopped(holder)
		}
		return rep, err
	}
	rep.Pumped = true
	budget := p.cfg.Budget
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-reserve)
	}
	return p.pump(ctx, holder, time.Now().Add(budget), rep)
}

// holderStopped is the reason take left with: "" holder is no work.
func holderStopped(holder string) string {
	if holder == "" {
		return StoppedIdle
	}
	return StoppedHeld
}

// take makes this invocation the pump. A hand-over holds its lease
// already (renewed here); any other trigger leaves at once when there is no
// work, or when the lease was renewed within two cadences (its holder is
// alive), and otherwise waits for a stale lease to lapse. A "" holder with
// no error means no work; a holder with false means somebody else holds it.
func (p *Pump) take(ctx context.Context, ev Event) (string, bool, error) {
	ttl := p.cfg.LeaseTTL.Milliseconds()
	if ev.Trigger == TriggerHandover && ev.Holder != "" {
		ok, err := p.cfg.Store.TakePumpLease(ctx, ev.Holder, ttl)
		return ev.Holder, ok, err
	}
	work, err := p.cfg.Store.Work(ctx)
	if err != nil {
		return "", false, err
	}
	if work.Idle() {
		return "", false, nil
	}
	holder := NewHolder()
	until := time.Now().Add(p.cfg.LeaseTTL + p.cfg.Every)
	for {
		l, found, err := p.cfg.Store.PumpLeaseNow(ctx)
		if err != nil {
			return "", false, err
		}
		now, err := p.cfg.Store.Now(ctx)
		if err != nil {
			return "", false, err
		}
		// A wake-up pending before this invocation leaves or pumps: the
		// holder it trusts, or this pump, may die before arming one.
		p.armWake(ctx, l.WakeAt)
		if found && l.Until >= now && now-l.RenewedAt < 2*p.cfg.Every.Milliseconds() {
			return l.Holder, false, nil
		}
		ok, err := p.cfg.Store.TakePumpLease(ctx, holder, ttl)
		if err != nil || ok {
			return holder, ok, err
		}
		if time.Now().After(until) {
			return l.Holder, false, nil
		}
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(p.cfg.Every / 2):
		}
	}
}

// pump runs the loop under holder's lease until it stops, and answers why.
func (p *Pump) pump(ctx context.Context, holder string, handOverAt time.Time, rep Report) (Report, error) {
	srv, err := p.cfg.Server(ctx)
	if err != nil {
		_ = p.cfg.Store.DropPumpLease(context.WithoutCancel(ctx), holder)
		return rep, err
	}
	t := &tally{rep: &rep}
	run := &loop{run: func(ctx context.Context) error {
		return srv.Run(ctx, p.cfg.Every, func(r site.Report) { p.deliver(ctx, t, r) })
	}}
	run.start(ctx)
	stop := run.stop

	// One wake-up pending while this pump holds the lease (armWake).
	var wakeAt time.Time
	if l, found, err := p.cfg.Store.PumpLeaseNow(ctx); err == nil && found {
		wakeAt = p.armWake(ctx, l.WakeAt)
	}
	tick := time.NewTicker(p.cfg.Every)
	defer tick.Stop()
	ttl := p.cfg.LeaseTTL.Milliseconds()
	for {
		select {
		case <-ctx.Done():
			err := stop()
			rep.Stopped = StoppedCancelled
			return rep, errors.Join(err, ctx.Err())
		case err := <-run.done:
			run.cancel()
			// The loop stops on its own only for a refusal that will not fix
			// itself (the relay refused this site): the lease is given up
			// so the next trigger tries again, and the error is the
			// invocation's.
			_ = p.cfg.Store.DropPumpLease(context.WithoutCancel(ctx), holder)
			rep.Stopped = "the loop failed"
			return rep, err
		case <-tick.C:
		}
		ok, err := p.cfg.Store.TakePumpLease(ctx, holder, ttl)
		if err != nil {
			// A renewal that could not be written: keep pumping; the lease
			// lapses only after LeaseTTL, and the next cycle tries again.
			p.log.WarnContext(ctx, "pump lease not renewed", slog.String("problem", err.Error()))
		} else if !ok {
			rep.Stopped = StoppedLeaseLost
			return rep, stop()
		}
		work, err := p.cfg.Store.Work(ctx)
		if err != nil {
			p.log.WarnContext(ctx, "pump work not read", slog.String("problem", err.Error()))
			continue
		}
		if p.cfg.OnCycle != nil {
			p.cfg.OnCycle(p.cycle(ctx, work, t.takeLate()))
		}
		if work.Idle() {
			if err := stop(); err != nil {
				return rep, err
			}
			stopped, err := p.stopIdle(ctx, holder, ttl)
			if stopped != "" || err != nil {
				rep.Stopped = stopped
				return rep, err
			}
			run.start(ctx)
			continue
		}
		// Armed once the cycle has seen work: one armed in the cycle that
		// finds the site idle would fire after the pump stopped, a second
		// wake-up of an idle site.
		wakeAt = p.armWake(ctx, wakeAt.UnixMilli())
		if !time.Now().Before(handOverAt) {
			if err := stop(); err != nil {
				return rep, err
			}
			return p.handOver(ctx, holder, ttl, rep)
		}
	}
}

// tally is what the loop delivered: the invocation's report, and the
// seals that missed their window since the last cycle took them.
type tally struct {
	mu   sync.Mutex
	rep  *Report
	late int
}

func (t *tally) takeLate() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.late
	t.late = 0
	return n
}

// deliver counts one report of the loop into t, and logs each ending this
// invocation made (the store makes each job's ending once, whichever
// invocation reaches it) and each seal that missed its window.
func (p *Pump) deliver(ctx context.Context, t *tally, r site.Report) {
	t.mu.Lock()
	t.rep.Sealed += len(r.Sealed)
	t.rep.Ended += len(r.Ended)
	t.rep.Late += len(r.Late)
	t.late += len(r.Late)
	t.mu.Unlock()
	for _, e := range r.Ended {
		p.log.InfoContext(ctx, "job ended", slog.String("job", e.JobID), slog.String("fate", string(e.Fate)))
	}
	for _, id := range r.Late {
		p.log.WarnContext(ctx, "seal missed the relay's awaiting window; the relay offers the job again", slog.String("job", id))
	}
}

// armWake keeps one wake-up pending: pending is the one recorded last
// (wall clock ms, 0 for none); once its time has come, this invocation
// claims the next, WakeAfter from now, and arms it. It answers the
// wake-up pending afterwards, as far as it knows.
//
// Any invocation that pumps or leaves a live holder to pump calls it, not
// only the holder on its cycle: a holder killed before its first cycle,
// or between its wake-up firing and its next cycle, would otherwise leave
// a lease every later trigger trusts and no wake-up to replace it, and
// the site's jobs wait for the next enqueue, which may never come.
func (p *Pump) armWake(ctx context.Context, pending int64) time.Time {
	now := time.Now()
	if pending > now.UnixMilli() {
		return time.UnixMilli(pending)
	}
	at := now.Add(p.cfg.WakeAfter)
	claimed, err := p.cfg.Store.ClaimPumpWake(ctx, at.UnixMilli(), now.UnixMilli())
	if err != nil {
		p.log.WarnContext(ctx, "pump wake-up not recorded", slog.String("problem", err.Error()))
		return time.UnixMilli(pending)
	}
	if !claimed {
		// Another invocation armed it meanwhile.
		if l, found, err := p.cfg.Store.PumpLeaseNow(ctx); err == nil && found {
			return time.UnixMilli(l.WakeAt)
		}
		return time.UnixMilli(pending)
	}
	if err := p.cfg.Waker.Wake(ctx, at); err != nil {
		// Recorded and never to fire, it would stop every later trigger
		// from arming one until its time came, and the site's in-flight
		// jobs would wait for an enqueue. (An invocation killed between
		// the record and the arm is retried by Lambda, which arms it.)
		p.log.WarnContext(ctx, "pump wake-up not armed", slog.String("problem", err.Error()))
		if err := p.cfg.Store.ForgetPumpWake(ctx, at.UnixMilli()); err != nil {
			p.log.WarnContext(ctx, "pump wake-up not forgotten", slog.String("problem", err.Error()))
			return at
		}
		return time.Time{}
	}
	return at
}

// cycle is what one cycle reports: the lag of the oldest job waiting to be
// published, and the seals that missed their window since the last.
func (p *Pump) cycle(ctx context.Context, work sitedynamo.Work, late int) Cycle {
	c := Cycle{Late: late}
	if work.OldestUnpublishedAt != 0 {
		if storeNow, err := p.cfg.Store.Now(ctx); err == nil {
			c.LagMs = max(0, storeNow-work.OldestUnpublishedAt)
		}
	}
	return c
}

// stopIdle gives the lease up once the site has no work, and says why the
// pump stops; "" when work arrived meanwhile and it holds the lease again.
// A job stored between the idle read and the drop started a pump that
// found this lease live and left: so the work is read again, after the
// drop, and the pump carries on if it is there.
func (p *Pump) stopIdle(ctx context.Context, holder string, ttl int64) (string, error) {
	if err := p.cfg.Store.DropPumpLease(ctx, holder); err != nil {
		return "", err
	}
	again, err := p.cfg.Store.Work(ctx)
	if err != nil || again.Idle() {
		return StoppedIdle, err
	}
	if ok, err := p.cfg.Store.TakePumpLease(ctx, holder, ttl); err != nil || !ok {
		return StoppedHeld, err
	}
	return "", nil
}

// handOver passes the lease to a successor and starts it: the pump's
// budget is spent, and a job still in flight must be collected all the
// same.
func (p *Pump) handOver(ctx context.Context, holder string, ttl int64, rep Report) (Report, error) {
	successor := NewHolder()
	passed, err := p.cfg.Store.PassPumpLease(ctx, holder, successor, ttl)
	if err != nil || !passed {
		rep.Stopped = StoppedLeaseLost
		return rep, err
	}
	rep.Successor, rep.Stopped = successor, StoppedHandedOver
	return rep, p.cfg.Starter.Start(ctx, Event{Trigger: TriggerHandover, Holder: successor})
}

// loop is the cloud lane's loop in a goroutine, started and stopped.
type loop struct {
	run    func(ctx context.Context) error
	cancel context.CancelFunc
	done   chan error
}

func (l *loop) start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan error, 1)
	go func() { l.done <- l.run(ctx) }()
}

// stop ends the loop and waits for it; an end by the cancel is no error.
func (l *loop) stop() error {
	l.cancel()
	err := <-l.done
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
