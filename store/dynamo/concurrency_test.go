package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

const (
	cSite     = "site_c"
	cLeaseMs  = 30_000
	cReplicas = 8
)

type runnerSpec struct {
	id     string
	owner  string
	routes map[string]bool // job owners on cSite this device may serve
}

type jobSpec struct {
	id       string
	owner    string
	private  bool
	deadline int64
}

type knownGrant struct {
	job    int
	runner int
	lease  string
}

// workload is the concurrency test's world and its recorded history.
type workload struct {
	runners []runnerSpec
	jobs    []jobSpec
	clock   *clock.Manual

	tick atomic.Int64
	// executed counts every store call the workers made, recorded or not
	// (a claim that granted nothing leaves no per-job operation).
	executed atomic.Int64

	mu       sync.Mutex
	history  []porcupine.Operation
	grants   []knownGrant
	accepted map[int][]string
	// maybe are results whose complete returned an error: recorded or not.
	maybe   map[int][]string
	granted int
}

func newWorkload(clk *clock.Manual, jobs int) *workload {
	w := &workload{clock: clk, accepted: map[int][]string{}, maybe: map[int][]string{}}
	w.runners = []runnerSpec{
		{"r0", "alice", map[string]bool{"alice": true, "bob": true}},
		{"r1", "alice", map[string]bool{"alice": true}},
		{"r2", "bob", map[string]bool{"bob": true}},
		{"r3", "bob", map[string]bool{"bob": true, "alice": true}},
	}
	start := clock.EpochMs(clk.Now())
	for i := range jobs {
		owner := []string{"alice", "bob"}[i%2]
		deadline := int64(4_102_444_800_000)
		if i%7 == 6 {
			// Some jobs reach their deadline during the run.
			deadline = start + int64(60_000+i*5_000)
		}
		w.jobs = append(w.jobs, jobSpec{id: fmt.Sprintf("job%02d", i), owner: owner, private: i%3 == 0, deadline: deadline})
	}
	return w
}

func (w *workload) initial(job int) jobModel {
	j := w.jobs[job]
	return jobModel{state: store.StateQueued, runner: -1, reofferTo: -1, owner: j.owner, private: j.private, deadline: j.deadline}
}

func (w *workload) stub(job int) protocol.JobStub {
	j := w.jobs[job]
	aud := "team"
	if j.private {
		aud = "private"
	}
	return protocol.JobStub{ID: j.id, Kind: "llm.generate", Owner: j.owner, Site: "BYOLLM-C", Audience: aud, SizeClass: "small", DeadlineAt: j.deadline}
}

func (w *workload) jobIndex(id string) int {
	for i, j := range w.jobs {
		if j.id == id {
			return i
		}
	}
	panic("unknown job " + id)
}

func (w *workload) record(client int, in mInput, call int64, out mOutput) {
	w.executed.Add(1)
	if in.now == 0 {
		// The clock moves only while nothing is in flight: this is the
		// instant the operation saw.
		in.now = w.now()
	}
	ret := w.tick.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history = append(w.history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (w *workload) randomGrant(rng *rand.Rand) (knownGrant, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.grants) == 0 {
		return knownGrant{}, false
	}
	// Mostly recent grants, sometimes an old (likely stale) one.
	n := len(w.grants)
	if rng.IntN(4) == 0 {
		return w.grants[rng.IntN(n)], true
	}
	return w.grants[max(0, n-1-rng.IntN(min(n, 12)))], true
}

func (w *workload) now() int64 { return clock.EpochMs(w.clock.Now()) }

// worker runs one replica's operations.
type worker struct {
	t *testing.T
	// faults: the replica's client injects faults, so an error is an
	// acceptable answer if it is retryable, and its effect is unknown.
	faults bool
	id     int
	s      *Store
	w      *workload
	rng    *rand.Rand
	ctx    context.Context
	n      int
}

// fail handles an operation's error: with faults injected, a retryable
// error is recorded as an operation whose effect is unknown; anything else
// fails the test.
func (k *worker) fail(what string, err error, call int64, in mInput) {
	if k.faults && retryable(err) {
		k.w.record(k.id, in, call, mOutput{unknown: true})
		return
	}
	k.t.Errorf("worker %d %s: %v", k.id, what, err)
}

// failAll is fail for an operation that may have touched every job (a
// sweep, or the sweep a claim runs first).
func (k *worker) failAll(what string, err error, call int64, now int64) {
	if !(k.faults && retryable(err)) {
		k.t.Errorf("worker %d %s: %v", k.id, what, err)
		return
	}
	for j := range k.w.jobs {
		k.w.record(k.id, mInput{kind: opSweep, job: j, now: now}, call, mOutput{unknown: true})
	}
}

// retryable is what a caller may retry: the store gave up under contention,
// or a fault it could not resolve came through.
func retryable(err error) bool {
	var tce *types.TransactionCanceledException
	var conflict *types.TransactionConflictException
	return errors.Is(err, ErrContention) || errors.Is(err, errLostAck) || errors.Is(err, errThrottled) ||
		errors.As(err, &tce) || errors.As(err, &conflict)
}

func (k *worker) enqueue(job int) {
	call := k.w.tick.Add(1)
	got, err := k.s.Enqueue(k.ctx, store.EnqueueInput{ID: k.w.jobs[job].id, SiteID: cSite, Stub: k.w.stub(job)})
	if err != nil {
		k.fail("enqueue", err, call, mInput{kind: opEnqueue, job: job})
		return
	}
	k.w.record(k.id, mInput{kind: opEnqueue, job: job}, call, mOutput{state: got.State})
}

func (k *worker) claim() {
	r := k.rng.IntN(len(k.w.runners))
	spec := k.w.runners[r]
	in := store.ClaimInput{
		RunnerID: spec.id, Owner: spec.owner, Device: protocol.PublicIdentity{Identity: "id-" + spec.id, Encryption: "e", EncryptionSig: "s"},
		Kinds: []string{"llm.generate"}, Max: 1 + k.rng.IntN(3), LeaseMs: cLeaseMs,
	}
	for owner := range spec.routes {
		in.Routes = append(in.Routes, store.Route{SiteID: cSite, Owner: owner})
	}
	now := k.w.now()
	call := k.w.tick.Add(1)
	granted, err := k.s.Claim(k.ctx, in)
	k.w.executed.Add(1)
	if err != nil {
		// Claims run where nothing is due, so the sweep a claim starts with
		// changes nothing, and a claim that failed granted nothing (one that
		// granted returns its grants): nothing to record. If either were
		// untrue, the model would not fit the jobs' later histories.
		if !(k.faults && retryable(err)) {
			k.t.Errorf("worker %d claim: %v", k.id, err)
		}
		return
	}
	ret := k.w.tick.Add(1)
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	for _, g := range granted {
		job := k.w.jobIndex(g.ID)
		k.w.history = append(k.w.history, porcupine.Operation{
			ClientId: k.id, Call: call, Return: ret,
			Input:  mInput{kind: opGrant, job: job, runner: r, owner: spec.owner, now: now, leaseMs: cLeaseMs},
			Output: mOutput{lease: g.Lease.ID, expiresAt: g.Lease.ExpiresAt},
		})
		k.w.grants = append(k.w.grants, knownGrant{job: job, runner: r, lease: g.Lease.ID})
		k.w.granted++
	}
}

func (k *worker) seal() {
	job := k.rng.IntN(len(k.w.jobs))
	if g, ok := k.w.randomGrant(k.rng); ok && k.rng.IntN(3) > 0 {
		job = g.job
	}
	call := k.w.tick.Add(1)
	res, err := k.s.Seal(k.ctx, store.SealInput{SiteID: cSite, JobID: k.w.jobs[job].id, Envelope: protocol.SealedEnvelope{
		Ciphertext: "payload", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: k.w.jobs[job].deadline,
	}})
	if err != nil {
		k.fail("seal", err, call, mInput{kind: opSeal, job: job})
		return
	}
	k.w.record(k.id, mInput{kind: opSeal, job: job}, call, mOutput{state: res.State, refused: res.Refused, was: res.Was})
}

func (k *worker) holderOp() {
	g, ok := k.w.randomGrant(k.rng)
	if !ok {
		return
	}
	runner := g.runner
	if k.rng.IntN(10) == 0 {
		// Somebody else's grant: not-holder or not-found.
		runner = (runner + 1) % len(k.w.runners)
	}
	rid := k.w.runners[runner].id
	ref := protocol.GrantRef{JobID: k.w.jobs[g.job].id, LeaseID: g.lease}
	now := k.w.now()
	call := k.w.tick.Add(1)
	switch p := k.rng.IntN(100); {
	case p < 30:
		res, err := k.s.TakePayload(k.ctx, store.HolderInput{JobID: ref.JobID, RunnerID: rid, LeaseID: ref.LeaseID})
		if err != nil {
			k.fail("take", err, call, mInput{kind: opTake, job: g.job, runner: runner, lease: g.lease})
			return
		}
		k.w.record(k.id, mInput{kind: opTake, job: g.job, runner: runner, lease: g.lease}, call, mOutput{ok: res.Envelope != nil, refused: res.Refused})
	case p < 60:
		k.n++
		cipher := fmt.Sprintf("result-%d-%d", k.id, k.n)
		res, err := k.s.Complete(k.ctx, store.CompleteInput{JobID: ref.JobID, RunnerID: rid, LeaseID: ref.LeaseID, Disposition: store.DispositionOK,
			Envelope: protocol.SealedEnvelope{Ciphertext: cipher, RecipientKeyID: "site", SenderKeyID: "dev", Direction: "result", DeadlineAt: 1}})
		if err != nil {
			k.fail("complete", err, call, mInput{kind: opComplete, job: g.job, runner: runner, lease: g.lease, cipher: cipher})
			if k.faults {
				k.w.mu.Lock()
				k.w.maybe[g.job] = append(k.w.maybe[g.job], cipher)
				k.w.mu.Unlock()
			}
			return
		}
		k.w.record(k.id, mInput{kind: opComplete, job: g.job, runner: runner, lease: g.lease, cipher: cipher}, call,
			mOutput{accepted: res.Accepted, duplicate: res.Duplicate, state: res.State, refused: res.Refused})
		if res.Accepted {
			k.w.mu.Lock()
			k.w.accepted[g.job] = append(k.w.accepted[g.job], cipher)
			k.w.mu.Unlock()
		}
	case p < 75:
		reason := []store.ReleaseReason{store.ReleaseShutdown, store.ReleaseBackendDown, store.ReleaseRefused}[k.rng.IntN(3)]
		var retryAfter int64
		if k.rng.IntN(3) == 0 {
			retryAfter = now + 20_000
		}
		released, err := k.s.ReleaseLeases(k.ctx, store.ReleaseInput{RunnerID: rid, Leases: []protocol.GrantRef{ref}, Reason: reason, RetryAfter: retryAfter})
		if err != nil {
			k.fail("release", err, call, mInput{kind: opRelease, job: g.job, runner: runner, lease: g.lease, reason: reason, retryAfter: retryAfter})
			return
		}
		k.w.record(k.id, mInput{kind: opRelease, job: g.job, runner: runner, lease: g.lease, reason: reason, retryAfter: retryAfter}, call,
			mOutput{ok: len(released) == 1})
	default:
		res, err := k.s.RenewLeases(k.ctx, store.RenewInput{RunnerID: rid, Leases: []protocol.GrantRef{ref}, LeaseMs: cLeaseMs})
		if err != nil {
			k.fail("renew", err, call, mInput{kind: opRenew, job: g.job, runner: runner, lease: g.lease, now: now, leaseMs: cLeaseMs})
			return
		}
		out := mOutput{ok: len(res.Renewed) == 1}
		if out.ok {
			out.expiresAt = res.Renewed[0].ExpiresAt
		}
		k.w.record(k.id, mInput{kind: opRenew, job: g.job, runner: runner, lease: g.lease, now: now, leaseMs: cLeaseMs}, call, out)
	}
}

func (k *worker) cancel(job int) {
	call := k.w.tick.Add(1)
	ok, err := k.s.Cancel(k.ctx, cSite, k.w.jobs[job].id)
	if err != nil {
		k.fail("cancel", err, call, mInput{kind: opCancel, job: job})
		return
	}
	k.w.record(k.id, mInput{kind: opCancel, job: job}, call, mOutput{ok: ok})
}

func (k *worker) sweep() {
	now := k.w.now()
	call := k.w.tick.Add(1)
	res, err := k.s.Sweep(k.ctx)
	k.w.executed.Add(1)
	if err != nil {
		k.failAll("sweep", err, call, now)
		return
	}
	ret := k.w.tick.Add(1)
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	for _, list := range []struct {
		jobs    []store.Job
		removed bool
	}{{res.Requeued, false}, {res.Removed, true}} {
		for _, j := range list.jobs {
			k.w.history = append(k.w.history, porcupine.Operation{
				ClientId: k.id, Call: call, Return: ret,
				Input:  mInput{kind: opSweep, job: k.w.jobIndex(j.ID), now: now},
				Output: mOutput{removed: list.removed},
			})
		}
	}
}

// TestConcurrentReplicasStayLinearizable races eight replicas (separate
// clients over one DynamoDB Local table) through claims, seals, fetches,
// completions, releases, renewals, cancels and sweeps on shared jobs, with
// the store clock moved between rounds so leases and awaiting windows
// lapse. It checks, on consistent snapshots taken while the race runs,
// that no pair holds more than UnsealedPerPair unsealed grants and that
// each pair's unsealed set holds every one of its awaiting jobs' leases; after
// every sweep round that nothing due is left; and at the end that the
// recorded history is linearizable against the sequential model (which
// also means no job is ever held under two live grants), that no job was
// accepted twice, and that every accepted result is listed.
func TestConcurrentReplicasStayLinearizable(t *testing.T) {
	races(t, raceFromEnv(t, raceConfig{replicas: cReplicas, rounds: 8, ops: 40, jobs: 32, seed: 42, runs: 1}))
}

// TestFaultyReplicasStayLinearizable is the same race with every replica's
// client injecting transaction conflicts, spurious condition failures,
// throttling and lost acknowledgements at random. Every answer a caller
// gets must fit the model; an error must be retryable, and is recorded as
// an operation that may or may not have taken effect.
func TestFaultyReplicasStayLinearizable(t *testing.T) {
	races(t, raceFromEnv(t, raceConfig{replicas: cReplicas, rounds: 6, ops: 24, jobs: 24, faultRate: 0.08, seed: 42, runs: 1}))
}

// raceConfig is the shape of a race. The defaults above are make test's
// short run; make race-long sets the BYORELAY_RACE_* variables (see
// raceFromEnv) to run the same checks at scale.
type raceConfig struct {
	replicas, rounds, ops, jobs int
	// faultRate is the chance that a replica's DynamoDB call fails (see
	// faulty); 0 for a clean race.
	faultRate float64
	// seed drives every replica's and every injector's dice; run i of runs
	// uses seed+i, each on a fresh table with its own history and check.
	seed uint64
	runs int
}

// raceFromEnv overrides cfg from the environment: BYORELAY_RACE_REPLICAS,
// _ROUNDS, _OPS (per replica per round), _JOBS, _SEED, _RUNS, and
// _FAULTS (a rate; it applies only to a race that injects faults, so the
// clean race stays clean).
func raceFromEnv(t *testing.T, cfg raceConfig) raceConfig {
	t.Helper()
	for name, dst := range map[string]*int{
		"BYORELAY_RACE_REPLICAS": &cfg.replicas, "BYORELAY_RACE_ROUNDS": &cfg.rounds,
		"BYORELAY_RACE_OPS": &cfg.ops, "BYORELAY_RACE_JOBS": &cfg.jobs, "BYORELAY_RACE_RUNS": &cfg.runs,
	} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("BYORELAY_RACE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BYORELAY_RACE_SEED=%q: %v", v, err)
		}
		cfg.seed = n
	}
	if v := os.Getenv("BYORELAY_RACE_FAULTS"); v != "" && cfg.faultRate > 0 {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r >= 1 {
			t.Fatalf("BYORELAY_RACE_FAULTS=%q: want a rate in (0, 1)", v)
		}
		cfg.faultRate = r
	}
	// snapshot reads every job and both pairs' sets in one TransactGetItems,
	// which takes at most 100 items.
	if cfg.jobs > 98 {
		t.Fatalf("BYORELAY_RACE_JOBS=%d: at most 98 jobs fit one consistent snapshot", cfg.jobs)
	}
	return cfg
}

// races runs cfg.runs races, one per seed, and reports their sum.
func races(t *testing.T, cfg raceConfig) {
	start := time.Now()
	var total raceStats
	for i := range cfg.runs {
		seed := cfg.seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			st := race(t, cfg, seed)
			total.add(st)
		})
		if t.Failed() {
			break
		}
	}
	t.Logf("%d race(s) of %d replicas, faults %.2f, seeds %d..%d: %d store calls, %d per-job operations checked (%d with unknown outcome), %d grants, faults injected %v, in %s",
		cfg.runs, cfg.replicas, cfg.faultRate, cfg.seed, cfg.seed+uint64(cfg.runs)-1,
		total.calls, total.ops, total.unknown, total.grants, total.injected, time.Since(start).Round(time.Second))
}

// raceStats is what one race did, for the report.
type raceStats struct {
	calls, ops, unknown, grants int64
	injected                    map[fault]int
}

func (s *raceStats) add(o raceStats) {
	s.calls += o.calls
	s.ops += o.ops
	s.unknown += o.unknown
	s.grants += o.grants
	if s.injected == nil {
		s.injected = map[fault]int{}
	}
	for k, v := range o.injected {
		s.injected[k] += v
	}
}

func race(t *testing.T, cfg raceConfig, seed uint64) raceStats {
	if testing.Short() {
		// A quick look: half the rounds. CI runs the whole race.
		cfg.rounds /= 2
	}
	ctx := context.Background()
	clk := clock.NewManual(storetest.Start)
	table := newTable(t)
	w := newWorkload(clk, cfg.jobs)
	var workers []*worker
	var injectors []*faulty
	for i := range cfg.replicas {
		var wrap func(ddb.API) ddb.API
		if cfg.faultRate > 0 {
			wrap = func(a ddb.API) ddb.API {
				f := newFaulty(a, cfg.faultRate, seed<<8+uint64(i))
				// At least one of each, whatever the dice say.
				f.next("TransactWriteItems", lostAck, conflict)
				f.next("PutItem", lostAck, conditionFailed)
				injectors = append(injectors, f)
				return f
			}
		}
		workers = append(workers, &worker{
			t: t, id: i, s: replica(t, table, store.Options{Clock: clk}, wrap), w: w, faults: wrap != nil,
			rng: rand.New(rand.NewPCG(uint64(i), seed)), ctx: ctx,
		})
	}
	watcher := replica(t, table, store.Options{Clock: clk}, nil)

	parallel := func(f func(k *worker)) {
		var wg sync.WaitGroup
		for _, k := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f(k)
			}()
		}
		wg.Wait()
	}

	snapshots := 0
	waves := (cfg.jobs + 7) / 8
	for round := range cfg.rounds {
		// New work arrives in waves, enqueued concurrently and more than
		// once (a replayed enqueue must change nothing).
		if wave := round * waves / cfg.rounds; round*waves%cfg.rounds < waves && wave < waves {
			lo, hi := wave*8, min(cfg.jobs, wave*8+8)
			parallel(func(k *worker) {
				for j := lo; j < hi; j++ {
					if (j+k.id)%3 == 0 {
						k.enqueue(j)
					}
				}
			})
		}
		// The clock moves only while nothing is in flight, so every
		// operation of a phase sees one instant.
		clk.Advance(time.Duration([]int{0, 4, 11, 31}[round%4]) * time.Second)

		// Sweep phase: sweeps race each other and holder calls.
		parallel(func(k *worker) {
			if k.id < 3 {
				k.sweep()
				return
			}
			for range 4 {
				if k.rng.IntN(2) == 0 {
					k.seal()
				} else {
					k.holderOp()
				}
			}
		})
		// One clean sweep alone, so the work phase starts with nothing due.
		final := &worker{t: t, id: cfg.replicas, s: watcher, w: w, rng: rand.New(rand.NewPCG(9, seed)), ctx: ctx}
		final.sweep()
		checkNothingDue(t, watcher, w)

		// Work phase, watched by a snapshot reader.
		stop := make(chan struct{})
		var watched sync.WaitGroup
		watched.Add(1)
		go func() {
			defer watched.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				checkSnapshot(t, watcher, w)
				snapshots++
			}
		}()
		parallel(func(k *worker) {
			for range cfg.ops {
				switch p := k.rng.IntN(100); {
				case p < 35:
					k.claim()
				case p < 55:
					k.seal()
				case p < 99:
					k.holderOp()
				default:
					k.sweep()
				}
			}
			if round == 3 && k.id == 0 {
				k.cancel(5)
			}
		})
		close(stop)
		watched.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	injected := map[fault]int{}
	for _, f := range injectors {
		for k, v := range f.counts {
			injected[k] += v
		}
	}
	unknown := 0
	for _, op := range w.history {
		if op.Output.(mOutput).unknown {
			unknown++
		}
	}
	t.Logf("%d store calls, %d per-job operations recorded (%d with unknown outcome), %d grants, %d snapshots, faults injected %v",
		w.executed.Load(), len(w.history), unknown, w.granted, snapshots, injected)
	if w.granted < 2*cfg.rounds || snapshots == 0 {
		t.Fatalf("the race did too little to prove anything: %d grants, %d snapshots", w.granted, snapshots)
	}
	if cfg.faultRate > 0 && injected[lostAck] == 0 {
		t.Fatalf("no lost acknowledgement was injected: %v", injected)
	}
	res, info := porcupine.CheckOperationsVerbose(w.model(), w.history, 60*time.Second)
	if res != porcupine.Ok {
		// t.TempDir is gone when the test ends; name a path to keep it.
		path := os.Getenv("BYORELAY_PORCUPINE_HTML")
		if path == "" {
			path = t.TempDir() + "/history.html"
		}
		_ = porcupine.VisualizePath(w.model(), info, path)
		t.Fatalf("history is %s against the model (visualisation: %s)", res, path)
	}

	// No accepted result lost or recorded twice.
	finished, err := watcher.Finished(ctx, cSite, 0)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[int]string{}
	for _, j := range finished {
		listed[w.jobIndex(j.ID)] = j.Result.Ciphertext
	}
	for job := range w.jobs {
		accepted, maybe := w.accepted[job], w.maybe[job]
		if len(accepted) > 1 {
			t.Errorf("%s accepted %d results: %v", w.jobs[job].id, len(accepted), accepted)
		}
		got, isListed := listed[job]
		switch {
		case w.jobs[job].deadline <= w.now():
			if isListed {
				t.Errorf("%s is past its deadline and still listed", w.jobs[job].id)
			}
		case len(accepted) == 1:
			if got != accepted[0] {
				t.Errorf("%s: accepted %q, listed %q", w.jobs[job].id, accepted[0], got)
			}
		case isListed && !slices.Contains(maybe, got):
			t.Errorf("%s lists %q, which no complete that could have succeeded sent", w.jobs[job].id, got)
		}
	}
	return raceStats{calls: w.executed.Load(), ops: int64(len(w.history)), unknown: int64(unknown), grants: int64(w.granted), injected: injected}
}

// snapshot reads every job item and both pairs' unsealed sets in one
// TransactGetItems: a serializable view of the whole table's routing state.
func snapshot(t *testing.T, s *Store, w *workload) (jobs []*jobItem, held map[string][]string) {
	t.Helper()
	var gets []types.TransactGetItem
	for _, j := range w.jobs {
		gets = append(gets, types.TransactGetItem{Get: &types.Get{TableName: &s.table, Key: key(jobPK(cSite, j.id), skJob)}})
	}
	owners := []string{"alice", "bob"}
	for _, o := range owners {
		gets = append(gets, types.TransactGetItem{Get: &types.Get{TableName: &s.table, Key: key(unsealedPK(cSite, unsealedShard(o, s.unsealedShards)), unsealedSK(o))}})
	}
	out, err := s.db.TransactGetItems(context.Background(), &dynamodb.TransactGetItemsInput{TransactItems: gets})
	if err != nil {
		t.Errorf("snapshot: %v", err)
		return nil, nil
	}
	held = map[string][]string{}
	for i, r := range out.Responses {
		if i >= len(w.jobs) {
			held[owners[i-len(w.jobs)]] = heldLeases(r.Item)
			continue
		}
		if len(r.Item) == 0 {
			continue
		}
		j, err := unmarshalJob(r.Item)
		if err != nil {
			t.Errorf("snapshot: %v", err)
			return nil, nil
		}
		if j.Gone {
			// A removed job's tombstone: no job at all.
			continue
		}
		jobs = append(jobs, j)
	}
	return jobs, held
}

// checkSnapshot asserts the cross-job invariants on one consistent view.
func checkSnapshot(t *testing.T, s *Store, w *workload) {
	jobs, held := snapshot(t, s, w)
	awaiting := map[string][]string{}
	now := w.now()
	for _, j := range jobs {
		// Live: a grant past its window is over for every reader (the
		// sweep ends it), and one whose claim's job write landed after the
		// set's check removed its member is always past it (repairSlots).
		if j.State == string(store.StateAwaitingPayload) && j.AwaitingUntil > now {
			awaiting[j.Owner] = append(awaiting[j.Owner], j.Lease)
		}
		if j.claimed() != (j.State != string(store.StateQueued)) {
			t.Errorf("%s is %s with holder %q", j.JobID, j.State, j.Lease)
		}
	}
	for _, owner := range []string{"alice", "bob"} {
		if n := len(awaiting[owner]); n > store.UnsealedPerPair {
			t.Errorf("pair (%s, %s) holds %d unsealed grants", cSite, owner, n)
		}
		// Every live awaiting grant is in its pair's set, so the set's cap
		// bounds them. The set may also hold a grant that has just left
		// awaiting-payload: its slot is freed after the write that moved
		// the job (freeSlot).
		for _, l := range awaiting[owner] {
			if !slices.Contains(held[owner], l) {
				t.Errorf("pair (%s, %s): awaiting lease %s is not in the unsealed set %v", cSite, owner, l, held[owner])
			}
		}
	}
}

// checkNothingDue asserts a completed sweep left nothing due.
func checkNothingDue(t *testing.T, s *Store, w *workload) {
	jobs, _ := snapshot(t, s, w)
	now := w.now()
	for _, j := range jobs {
		// A site's finished list (F#) is in the due index too, but no
		// sweep reads it: its entries are deadlines for TTL.
		if strings.HasPrefix(j.DK, "D#") && j.DU <= now {
			t.Errorf("after a full sweep %s (%s) is still due at %d (now %d)", j.JobID, j.State, j.DU, now)
		}
	}
}
