// Package bench measures byorelay: how many jobs a second it moves, what
// each job costs in DynamoDB capacity, whether a claim stays fast when the
// queue is deep, and how big and slow to start its Lambda functions are.
//
// One run drives the full job lifecycle (enqueue, claim, pending, payload,
// fetch, result, results) over HTTP with real signatures and real sealed
// envelopes against four targets in interleaved rounds: byorelay on the
// memory store on plain net/http and behind the local API server; byorelay
// on DynamoDB Local (the local stack, every function behind the local API
// server, its SDK client metering capacity); and the reference relay,
// @byollm/relay 0.1.1, in memory in Node on the same projection. Each
// target runs in a process of its own, apart from the driver's, so each
// server's CPU is its own and the driver's is on none of them. The machine is shared
// and noisy, so the report leads with medians of per-round ratios; absolute
// figures are context.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest"
)

// driverGCPercent is GOGC while the bench runs (the default is 100): the
// driver's live heap is a few megabytes, so four times more garbage
// between collections costs little memory.
const driverGCPercent = 400

// Config is one benchmark run.
type Config struct {
	// Sites and Daemons: each daemon is its own owner, consenting to every
	// site, and runs one lifecycle at a time (so Daemons is the
	// concurrency).
	Sites   int
	Daemons int
	// Jobs is how many lifecycles are measured on each target, after
	// Warmup unmeasured ones; 0 skips the lifecycle phase.
	Jobs   int
	Warmup int
	// PhaseLimit stops a lifecycle phase from starting new jobs after this
	// long (0: none), and DepthLimit each depth phase: on a slow or busy
	// machine the run's length is bounded and the rates stay comparable
	// (completed jobs over elapsed time either way).
	PhaseLimit time.Duration
	DepthLimit time.Duration
	// Depths are the background queue depths of the scale phase, in
	// increasing order (jobs of other owners, queued across every site);
	// DepthJobs lifecycles are measured at each. Empty skips the phase.
	Depths    []int
	DepthJobs int
	// Targets to run, of TargetMemory, TargetMemoryAPIGW, TargetDynamo,
	// TargetReference; none runs only the cold start.
	Targets []string
	// Grants has byorelay's targets sign a grant for every claimed job, as
	// a relay with a grant key does, with every consent mapped to the
	// daemons' service: what the grant law costs a claim. The reference
	// target signs none either way.
	Grants bool
	// Rounds splits the lifecycle phase: each round runs every target for
	// Jobs/Rounds jobs (PhaseLimit/Rounds at most), the order rotating, so
	// a change in the machine's load lands on every target alike; the
	// verdicts are medians of per-round ratios.
	Rounds int
	// TargetCommand starts a memory or DynamoDB target process
	// (TargetMain): the CLI passes itself and its bench-target subcommand.
	TargetCommand []string
	// JobDeadline is each lifecycle job's deadlineAt from its enqueue. Done
	// jobs stay in every results answer until then (the protocol has no
	// acknowledgement), so it bounds how large results answers grow.
	JobDeadline time.Duration
	// ResultsDeadlines are the job deadlines of the results phase, on the
	// DynamoDB target after every other phase: ResultsJobs lifecycles (or
	// ResultsLimit) at each, for the results GET's capacity per job as the
	// deadline, and so the results a polling site holds, grows. Empty, or
	// ResultsJobs 0, skips it.
	ResultsDeadlines []time.Duration
	ResultsJobs      int
	ResultsLimit     time.Duration
	// ColdStart builds every function and measures its size and, under the
	// runtime interface emulator, its init in ColdStartRuns pairs with a
	// hello-world start.
	ColdStart     bool
	ColdStartRuns int
	// Idle is the idle phase's length on the DynamoDB target (0 skips it):
	// every daemon heartbeating and claiming at the default period with
	// nothing queued, for the keys an idle fleet heats.
	Idle time.Duration
	// OneSiteJobs is the one-site phase's lifecycles (at most, within
	// OneSiteLimit; 0 skips the phase): on a DynamoDB stack of its own
	// where every daemon consents to one site, after an idle phase of
	// OneSiteIdle (0 skips it), every job that site's, for the heat of
	// one site as it grows (SiteHeat). It runs with the DynamoDB target.
	OneSiteJobs  int
	OneSiteIdle  time.Duration
	OneSiteLimit time.Duration
	// RepoRoot is the repository (for the Node script and the builds).
	RepoRoot string
	// DynamoEndpoint is a running DynamoDB; "" starts DynamoDB Local.
	DynamoEndpoint string
	// Progress receives a line every few seconds; nil is silent.
	Progress io.Writer
}

// DefaultConfig is `make bench`.
func DefaultConfig() Config {
	return Config{
		Sites: 4, Daemons: 8, Jobs: 2000, Warmup: 16, PhaseLimit: 90 * time.Second,
		Depths: []int{100, 10_000, 100_000}, DepthJobs: 200, DepthLimit: 45 * time.Second,
		Targets:          []string{TargetMemory, TargetMemoryAPIGW, TargetDynamo, TargetReference},
		Rounds:           6,
		JobDeadline:      15 * time.Second,
		ResultsDeadlines: []time.Duration{15 * time.Second, 10 * time.Minute}, ResultsJobs: 1000, ResultsLimit: 60 * time.Second,
		Idle:        15 * time.Second,
		OneSiteJobs: 300, OneSiteIdle: idleHeartbeat, OneSiteLimit: 20 * time.Second,
		ColdStart: true, ColdStartRuns: 20,
	}
}

// Report is what a run measured; it is written as JSON.
type Report struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Machine Machine   `json:"machine"`
	Config  struct {
		Sites, Daemons, Jobs, Warmup, DepthJobs int
		IdleMs                                  int64
		Depths                                  []int
		JobDeadlineMs, PhaseLimitMs             int64
		DepthLimitMs                            int64
		Targets                                 []string
		Grants                                  bool
	} `json:"config"`
	// Targets by name.
	Targets map[string]*TargetReport `json:"targets"`
	// Ratios are same-run comparisons, "a/b" of jobs a second and of the
	// whole job's p50.
	Ratios []Ratio `json:"ratios"`
	// Rounds are the interleaved lifecycle rounds, each target's jobs/s
	// and server CPU per job in each.
	Rounds    []Round    `json:"rounds,omitempty"`
	ColdStart *ColdStart `json:"coldStart,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	GoVersion string  `json:"go"`
	OS        string  `json:"os"`
	Arch      string  `json:"arch"`
	CPUs      int     `json:"cpus"`
	Node      string  `json:"node,omitempty"`
	LoadAvg   string  `json:"loadAverageAtStart,omitempty"`
	CPUModel  string  `json:"cpuModel,omitempty"`
	MemoryGiB float64 `json:"memoryGiB,omitempty"`
}

// TargetReport is one target's phases.
type TargetReport struct {
	Lifecycle Phase        `json:"lifecycle"`
	Depth     []DepthPoint `json:"depth,omitempty"`
	// ClaimGrowth is the claim's p50 at the deepest queue over its p50 at
	// the shallowest.
	ClaimGrowth float64 `json:"claimP50Growth,omitempty"`
	// Idle is the idle phase (DynamoDB only), and Heat the hottest
	// partition keys of it and of the lifecycle phase.
	Idle *IdlePhase `json:"idle,omitempty"`
	Heat *Heat      `json:"heat,omitempty"`
	// Results is the results phase (DynamoDB only), one point a deadline.
	Results []ResultsPoint `json:"results,omitempty"`
	// OneSite is the one-site phase (DynamoDB only); its heat is
	// Heat.OneSite.
	OneSite *OneSitePhase `json:"oneSite,omitempty"`
}

// OneSitePhase is the workload on one site: a DynamoDB stack of its own,
// every daemon consenting to the one site, an idle phase and a lifecycle
// phase whose every job is that site's.
type OneSitePhase struct {
	SiteID     string     `json:"siteId"`
	Idle       *IdlePhase `json:"idle,omitempty"`
	EmptyPolls *SitePolls `json:"emptyPolls,omitempty"`
	Lifecycle  Phase      `json:"lifecycle"`
}

// ResultsPoint is the lifecycle at one job deadline, with the results
// GET's capacity per job: every site polls it until its job is listed.
type ResultsPoint struct {
	DeadlineMs int64 `json:"deadlineMs"`
	Phase      Phase `json:"phase"`
	// RCUPerJob and CallsPerJob are the results function's.
	RCUPerJob   float64 `json:"rcuPerJob"`
	CallsPerJob float64 `json:"callsPerJob"`
}

// DepthPoint is the lifecycle measured with Queued background jobs
// waiting.
type DepthPoint struct {
	Queued int   `json:"queued"`
	Phase  Phase `json:"phase"`
	// ClaimCapacity is DynamoDB capacity per claim call (DynamoDB only).
	ClaimCapacity *Capacity `json:"claimCapacity,omitempty"`
	// PreloadSeconds is how long the background top-up took.
	PreloadSeconds float64 `json:"preloadSeconds"`
}

// Round is one interleaved round of the lifecycle phase.
type Round struct {
	Index         int                `json:"round"`
	JobsPerSecond map[string]float64 `json:"jobsPerSecond"`
	CPUMsPerJob   map[string]float64 `json:"serverCpuMsPerJob,omitempty"`
}

// Ratio is one same-run comparison.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Rounds are the per-round values Value is the median of.
	Rounds []float64 `json:"rounds,omitempty"`
}

// Run runs the benchmark. It fails only when a target cannot start or a
// phase completes no job at all; failed lifecycles are counted in the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	say := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	rep := &Report{Started: time.Now().UTC(), Machine: machine(), Targets: map[string]*TargetReport{}}
	rep.Config.Sites, rep.Config.Daemons, rep.Config.Jobs, rep.Config.Warmup = cfg.Sites, cfg.Daemons, cfg.Jobs, cfg.Warmup
	rep.Config.DepthJobs, rep.Config.Depths, rep.Config.Targets = cfg.DepthJobs, cfg.Depths, cfg.Targets
	rep.Config.JobDeadlineMs = cfg.JobDeadline.Milliseconds()
	rep.Config.IdleMs = cfg.Idle.Milliseconds()
	rep.Config.Grants = cfg.Grants
	rep.Config.PhaseLimitMs, rep.Config.DepthLimitMs = cfg.PhaseLimit.Milliseconds(), cfg.DepthLimit.Milliseconds()

	w, err := newWorld(cfg.Sites, cfg.Daemons)
	if err != nil {
		return nil, err
	}
	w.grants = cfg.Grants
	// The driver's garbage collector runs on the cores the targets are
	// measured on, and the driver allocates per request (HTTP, JSON,
	// envelopes) with a small live heap: collecting less often takes less
	// of the machine from every target alike. Process-wide, so restored.
	defer debug.SetGCPercent(debug.SetGCPercent(driverGCPercent))
	if dir := os.Getenv(ProfileEnv); dir != "" {
		// The driver's own CPU profile, beside its targets' (the whole run).
		stop, err := startProfile(dir, "driver")
		if err != nil {
			return nil, err
		}
		defer stop()
	}

	endpoint := cfg.DynamoEndpoint
	needDynamo := slices.Contains(cfg.Targets, TargetDynamo) || cfg.ColdStart
	if endpoint == "" && needDynamo {
		say("starting DynamoDB Local…")
		ep, stop, err := localtest.StartDynamo()
		if err != nil {
			return nil, fmt.Errorf("DynamoDB Local: %w", err)
		}
		defer stop()
		endpoint = ep
	}

	targets := map[string]target{}
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for _, name := range cfg.Targets {
		say("starting target %s…", name)
		var t target
		switch name {
		case TargetMemory, TargetMemoryAPIGW:
			t, err = startMemory(ctx, cfg.TargetCommand, name, w)
		case TargetDynamo:
			t, err = startDynamo(ctx, cfg.TargetCommand, endpoint, w)
		case TargetReference:
			t, err = startReference(ctx, cfg.RepoRoot, w)
		}
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		targets[name] = t
		rep.Targets[name] = &TargetReport{}
	}

	if t := targets[TargetDynamo]; t != nil && cfg.Idle > 0 {
		// First, while nothing is queued and no job's end is due: an idle
		// fleet's cost, with no other job's sweep in it.
		say("idle phase on %s: %d daemons at the default heartbeat for %s…", TargetDynamo, len(w.daemons), cfg.Idle)
		p := runIdle(ctx, t, w, cfg.Idle)
		rep.Targets[TargetDynamo].Idle = &p
		say("  %d heartbeats, %d claims, %d failed", p.Heartbeats, p.Claims, p.Failed)
	}

	if cfg.Jobs > 0 && len(cfg.Targets) > 0 {
		for _, name := range cfg.Targets {
			if cfg.Warmup > 0 {
				runPhase(ctx, targets[name], w, phaseSpec{label: name + " warm-up", jobs: cfg.Warmup, tag: "warm", deadline: cfg.JobDeadline, limit: cfg.PhaseLimit, progress: cfg.Progress})
			}
		}
		rounds := map[string][]Phase{}
		lat := map[string]*samples{}
		for _, name := range cfg.Targets {
			lat[name] = newSamples()
		}
		started := time.Now()
		perRound := max(1, cfg.Jobs/cfg.Rounds)
		for r := range cfg.Rounds {
			order := slices.Clone(cfg.Targets)
			rot := r % len(order)
			order = append(order[rot:], order[:rot]...)
			row := Round{Index: r + 1, JobsPerSecond: map[string]float64{}, CPUMsPerJob: map[string]float64{}}
			for _, name := range order {
				p := runPhase(ctx, targets[name], w, phaseSpec{
					label: fmt.Sprintf("round %d/%d %s", r+1, cfg.Rounds, name), jobs: perRound,
					tag: fmt.Sprintf("r%d", r), deadline: cfg.JobDeadline, limit: cfg.PhaseLimit / time.Duration(cfg.Rounds),
					progress: cfg.Progress, samples: lat[name],
				})
				if p.Jobs == 0 {
					return nil, fmt.Errorf("target %s completed no job in round %d: %v", name, r+1, p.Errors)
				}
				rounds[name] = append(rounds[name], p)
				row.JobsPerSecond[name] = p.JobsPerSecond
				if p.ServerCPUMsPerJob > 0 {
					row.CPUMsPerJob[name] = p.ServerCPUMsPerJob
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
			rep.Rounds = append(rep.Rounds, row)
			line := fmt.Sprintf("round %d/%d:", r+1, cfg.Rounds)
			for _, name := range cfg.Targets {
				line += fmt.Sprintf(" %s %.0f jobs/s", name, row.JobsPerSecond[name])
			}
			left := time.Duration(float64(time.Since(started)) / float64(r+1) * float64(cfg.Rounds-r-1)).Round(time.Second)
			say("%s; lifecycle about %s left", line, left)
		}
		for _, name := range cfg.Targets {
			p := mergeRounds(rounds[name], lat[name])
			rep.Targets[name].Lifecycle = p
			say("  %s: %.1f jobs/s, job p50 %.1f ms, %d failed", name, p.JobsPerSecond, p.Latency["job"].P50, p.Failed)
		}
	}
	if tr := rep.Targets[TargetDynamo]; tr != nil {
		tr.Heat = heat(w, tr.Lifecycle.Jobs, tr.Lifecycle.Keys, tr.Idle)
		if cfg.OneSiteJobs > 0 {
			one, sh, err := runOneSite(ctx, cfg, endpoint, say)
			if err != nil {
				return nil, err
			}
			tr.OneSite = one
			if sh != nil && tr.Heat == nil {
				tr.Heat = &Heat{}
			}
			if sh != nil {
				tr.Heat.OneSite = sh
			}
		}
	}

	loaded := map[string]int{}
	for i, depth := range cfg.Depths {
		for _, name := range cfg.Targets {
			if name == TargetMemory || name == TargetMemoryAPIGW {
				// The depth question is whether DynamoDB keeps up with the
				// reference's in-memory queue; the memory store is not asked.
				continue
			}
			t := targets[name]
			say("depth %d on %s: topping up the background queue from %d", depth, name, loaded[name])
			start := time.Now()
			if err := t.preload(ctx, w, loaded[name], depth, cfg.Progress); err != nil {
				return nil, fmt.Errorf("target %s: preload to %d: %w", name, depth, err)
			}
			loaded[name] = depth
			pt := DepthPoint{Queued: depth, PreloadSeconds: time.Since(start).Seconds()}
			pt.Phase = runPhase(ctx, t, w, phaseSpec{
				label: fmt.Sprintf("%s @%d", name, depth), jobs: cfg.DepthJobs,
				tag: fmt.Sprintf("depth%d", i), deadline: cfg.JobDeadline, limit: cfg.DepthLimit, progress: cfg.Progress,
			})
			if claims := pt.Phase.Latency["claim"].Count; claims > 0 && pt.Phase.Capacity != nil {
				// The claim's own work and the in-line sweep it runs first.
				c := pt.Phase.Capacity[claimFunction()]
				c.add(pt.Phase.Capacity[claimFunction()+sweepSuffix])
				n := float64(claims)
				pt.ClaimCapacity = &Capacity{Calls: c.Calls, ReadUnits: c.ReadUnits / n, WriteUnits: c.WriteUnits / n, IndexWrite: c.IndexWrite / n}
			}
			rep.Targets[name].Depth = append(rep.Targets[name].Depth, pt)
			say("  %s @%d: claim p50 %.2f ms, %.1f jobs/s", name, depth, pt.Phase.Latency["claim"].P50, pt.Phase.JobsPerSecond)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	if t := targets[TargetDynamo]; t != nil && cfg.ResultsJobs > 0 {
		// Last: a long deadline's results stay listed past the phase, and
		// would be in every later phase's answers.
		for i, d := range cfg.ResultsDeadlines {
			say("results phase on %s: job deadline %s", TargetDynamo, d)
			p := runPhase(ctx, t, w, phaseSpec{
				label: fmt.Sprintf("%s results @%s", TargetDynamo, d), jobs: cfg.ResultsJobs,
				tag: fmt.Sprintf("res%d", i), deadline: d, limit: cfg.ResultsLimit, progress: cfg.Progress,
			})
			pt := ResultsPoint{DeadlineMs: d.Milliseconds(), Phase: p}
			if c, ok := p.Capacity[resultsFunction()]; ok && p.Jobs > 0 {
				pt.RCUPerJob = c.ReadUnits / float64(p.Jobs)
				pt.CallsPerJob = float64(c.Calls) / float64(p.Jobs)
			}
			rep.Targets[TargetDynamo].Results = append(rep.Targets[TargetDynamo].Results, pt)
			say("  results @%s: %.2f RCU/job over %.2f calls/job, %d jobs, %d failed", d, pt.RCUPerJob, pt.CallsPerJob, p.Jobs, p.Failed)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	for _, tr := range rep.Targets {
		if n := len(tr.Depth); n >= 2 && tr.Depth[0].Phase.Latency["claim"].P50 > 0 {
			tr.ClaimGrowth = tr.Depth[n-1].Phase.Latency["claim"].P50 / tr.Depth[0].Phase.Latency["claim"].P50
		}
	}
	rep.Ratios = ratios(rep)

	if cfg.ColdStart {
		say("cold start and size: building every function for arm64 and %s…", runtime.GOARCH)
		cs, err := measureColdStart(ctx, cfg.RepoRoot, endpoint, cfg.ColdStartRuns, cfg.Progress)
		if err != nil {
			// The phases above stand on their own: a function that does not
			// build is reported, not allowed to throw their figures away.
			say("cold start failed: %v", err)
			cs = &ColdStart{Error: err.Error()}
		}
		rep.ColdStart = cs
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// oneSiteID is the one-site phase's site, apart from the fleet's by name.
const oneSiteID = "bench-one-site"

func (cfg *Config) check() error {
	switch {
	case cfg.Sites < 1 || cfg.Daemons < 1:
		return errors.New("bench: need at least one site and one daemon")
	case cfg.Jobs < 0:
		return errors.New("bench: jobs must not be negative")
	case len(cfg.Targets) == 0 && !cfg.ColdStart:
		return errors.New("bench: no targets and no cold start: nothing to measure")
	case cfg.RepoRoot == "":
		return errors.New("bench: RepoRoot is required")
	case cfg.Idle < 0 || cfg.OneSiteIdle < 0:
		return errors.New("bench: Idle and OneSiteIdle must not be negative")
	case cfg.OneSiteJobs < 0:
		return errors.New("bench: OneSiteJobs must not be negative")
	case cfg.JobDeadline < time.Second:
		return errors.New("bench: JobDeadline must be at least a second")
	}
	for _, t := range cfg.Targets {
		if t != TargetMemory && t != TargetMemoryAPIGW && t != TargetDynamo && t != TargetReference {
			return fmt.Errorf("bench: unknown target %q", t)
		}
	}
	if !slices.IsSorted(cfg.Depths) {
		return errors.New("bench: depths must increase")
	}
	if len(cfg.Depths) > 0 && cfg.DepthJobs < 1 {
		return errors.New("bench: DepthJobs must be positive when depths are given")
	}
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	for _, t := range cfg.Targets {
		if t != TargetReference && len(cfg.TargetCommand) == 0 {
			return errors.New("bench: the memory and DynamoDB targets need TargetCommand")
		}
	}
	if cfg.ColdStart && cfg.ColdStartRuns < 1 {
		cfg.ColdStartRuns = 1
	}
	return nil
}

func resultsFunction() string {
	f, _ := lambdafn.Lookup(lambdafn.Results)
	return f.LogicalID
}

func claimFunction() string {
	f, _ := lambdafn.Lookup(lambdafn.Claim)
	return f.LogicalID
}

// ratios compares every pair of targets the run measured: jobs/s as the
// median of the per-round ratios, latency over the whole phase.
func ratios(rep *Report) []Ratio {
	var out []Ratio
	pairs := [][2]string{{TargetMemory, TargetReference}, {TargetMemoryAPIGW, TargetReference}, {TargetMemory, TargetMemoryAPIGW},
		{TargetDynamo, TargetReference}, {TargetDynamo, TargetMemoryAPIGW}}
	for _, p := range pairs {
		a, b := rep.Targets[p[0]], rep.Targets[p[1]]
		if a == nil || b == nil || b.Lifecycle.JobsPerSecond == 0 {
			continue
		}
		var perRound []float64
		for _, r := range rep.Rounds {
			if x, y := r.JobsPerSecond[p[0]], r.JobsPerSecond[p[1]]; y > 0 {
				perRound = append(perRound, x/y)
			}
		}
		out = append(out, Ratio{Name: fmt.Sprintf("jobs/s %s / %s, median of rounds", p[0], p[1]), Value: median(perRound), Rounds: perRound})
		if bp := b.Lifecycle.Latency["job"].P50; bp > 0 {
			out = append(out, Ratio{Name: fmt.Sprintf("job p50 %s / %s", p[0], p[1]), Value: a.Lifecycle.Latency["job"].P50 / bp})
		}
		if len(a.Depth) > 0 && len(a.Depth) == len(b.Depth) {
			last := len(a.Depth) - 1
			if bp := b.Depth[last].Phase.Latency["claim"].P50; bp > 0 {
				out = append(out, Ratio{Name: fmt.Sprintf("claim p50 at %d queued %s / %s", a.Depth[last].Queued, p[0], p[1]),
					Value: a.Depth[last].Phase.Latency["claim"].P50 / bp})
			}
		}
	}
	return out
}

// WriteJSON writes the report to path, creating its directory.
func (r *Report) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func machine() Machine {
	m := Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	if node, err := localtest.NodeBinary(); err == nil {
		if out, err := exec.Command(node, "--version").Output(); err == nil {
			m.Node = strings.TrimSpace(string(out))
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	return m
}
