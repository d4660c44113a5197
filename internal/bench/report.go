package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// endpoints in lifecycle order, then the whole job.
var endpoints = []string{"enqueue", "claim", "pending", "payload", "fetch", "result", "results", "job"}

// Markdown renders the report's tables, as docs/performance.md and
// docs/cost.md quote them.
func (r *Report) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "## Run of %s (%.0f s)\n\n", r.Started.Format("2006-01-02 15:04 MST"), r.Seconds)
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %.1f GiB, %s/%s, %s, Node %s; load average at start %s.\n\n",
		m.CPUModel, m.CPUs, m.MemoryGiB, m.OS, m.Arch, m.GoVersion, m.Node, m.LoadAvg)
	names := r.targetNames()
	if len(names) > 0 {
		fmt.Fprintf(&b, "Workload: %d sites, %d daemons (each its own owner, one job at a time), up to %d measured jobs or %d s per target after %d warm-up, job deadline %d s; at depth up to %d jobs or %d s.\n\n",
			r.Config.Sites, r.Config.Daemons, r.Config.Jobs, r.Config.PhaseLimitMs/1000, r.Config.Warmup, r.Config.JobDeadlineMs/1000,
			r.Config.DepthJobs, r.Config.DepthLimitMs/1000)
	}
	r.verdicts(&b)
	if r.Config.Jobs > 0 && len(names) > 0 {
		r.lifecycleTables(&b, names)
	}
	r.resultsTable(&b)

	if t := r.Targets[TargetDynamo]; t != nil && t.Heat != nil {
		t.heatTables(&b)
	}

	if r.hasDepth() {
		b.WriteString("\n### Claim at queue depth (background jobs of other owners, across every site)\n\n")
		b.WriteString("| target | queued | claim p50 ms | claim p95 ms | claim p99 ms | job p50 ms | jobs/s | RCU/claim | WCU/claim |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, n := range names {
			for _, d := range r.Targets[n].Depth {
				l := d.Phase.Latency["claim"]
				rcu, wcu := "–", "–"
				if d.ClaimCapacity != nil {
					rcu, wcu = fmt.Sprintf("%.2f", d.ClaimCapacity.ReadUnits), fmt.Sprintf("%.2f", d.ClaimCapacity.WriteUnits)
				}
				fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.2f | %.1f | %.1f | %s | %s |\n",
					n, d.Queued, l.P50, l.P95, l.P99, d.Phase.Latency["job"].P50, d.Phase.JobsPerSecond, rcu, wcu)
			}
		}
		header := "\n| target | claim p50 growth, deepest / shallowest |\n|---|---:|\n"
		for _, n := range names {
			if g := r.Targets[n].ClaimGrowth; g > 0 {
				b.WriteString(header)
				header = ""
				fmt.Fprintf(&b, "| %s | %.2f× |\n", n, g)
			}
		}
	}

	if cs := r.ColdStart; cs != nil && cs.Error != "" {
		fmt.Fprintf(&b, "\n### Function size and init duration\n\nNot measured: %s\n", cs.Error)
	}
	if cs := r.ColdStart; cs != nil && cs.Error == "" {
		fmt.Fprintf(&b, "\n### Function size and init duration\n\n%s; %d interleaved pairs (hello-world, function) per function; × hello init is the median of the per-pair ratios.\n\n", cs.Note, cs.Runs)
		b.WriteString("| function | arm64 bytes | arm64 zipped | × hello size | init median ms | paired hello median ms | × hello init (median of pairs) | pair ratios p25–p75 | first invoke median ms |\n|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
		var hello FunctionCost
		for _, f := range cs.Functions {
			if f.Name == helloName {
				hello = f
			}
		}
		for _, f := range cs.Functions {
			paired, times, spread := "–", "1.00", "–"
			if f.Name != helloName && len(f.InitRatios) == 0 {
				times = "not measured (another stack)"
			}
			if len(f.InitRatios) > 0 {
				paired = fmt.Sprintf("%.1f", median(f.HelloInitMs))
				times = fmt.Sprintf("%.2f", f.InitRatioMedian)
				spread = fmt.Sprintf("%.2f–%.2f", quantile(f.InitRatios, 0.25), quantile(f.InitRatios, 0.75))
			}
			name := f.Name
			if f.FirstReads != "" {
				name += " (" + f.FirstReads + ")"
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.1f | %s | %s | %s | %.1f |\n", name, f.Arm64Bytes, f.Arm64ZipBytes,
				ratio(float64(f.Arm64Bytes), float64(hello.Arm64Bytes)), f.InitMedianMs, paired, times, spread, f.FirstInvokeMedianMs)
		}
	}
	for _, n := range names {
		if errs := r.Targets[n].Lifecycle.Errors; len(errs) > 0 {
			fmt.Fprintf(&b, "\nFirst failures on %s:\n", n)
			for _, e := range errs {
				fmt.Fprintf(&b, "- `%s`\n", e)
			}
		}
	}
	return b.String()
}

// lifecycleTables is throughput, whole-job latency, the same-run ratios,
// latency per endpoint and DynamoDB capacity per job.
func (r *Report) lifecycleTables(b *strings.Builder, names []string) {
	b.WriteString("### Throughput and whole-job latency\n\n")
	b.WriteString("| target | jobs | failed | jobs/s | job p50 ms | job p95 ms | job p99 ms | server CPU ms/job | driver CPU ms/job |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range names {
		p := r.Targets[n].Lifecycle
		l := p.Latency["job"]
		cpu := "–"
		if p.ServerCPUMsPerJob > 0 {
			cpu = fmt.Sprintf("%.2f", p.ServerCPUMsPerJob)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %.2f |\n", n, p.Jobs, p.Failed, p.JobsPerSecond, l.P50, l.P95, l.P99, cpu, p.DriverCPUMsPerJob)
	}
	if len(r.Rounds) > 0 {
		b.WriteString("\nJobs/s per interleaved round (the order of targets rotates each round):\n\n| round |")
		for _, n := range names {
			fmt.Fprintf(b, " %s |", n)
		}
		b.WriteString("\n|---:|" + strings.Repeat("---:|", len(names)) + "\n")
		for _, rd := range r.Rounds {
			fmt.Fprintf(b, "| %d |", rd.Index)
			for _, n := range names {
				fmt.Fprintf(b, " %.1f |", rd.JobsPerSecond[n])
			}
			b.WriteString("\n")
		}
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\n| same-run ratio | value | per round |\n|---|---:|---|\n")
		for _, x := range r.Ratios {
			per := make([]string, len(x.Rounds))
			for i, v := range x.Rounds {
				per[i] = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(b, "| %s | %.2f | %s |\n", x.Name, x.Value, strings.Join(per, ", "))
		}
	}

	b.WriteString("\n### Latency per endpoint (ms, p50 / p95 / p99)\n\n| endpoint |")
	for _, n := range names {
		fmt.Fprintf(b, " %s |", n)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(names)) + "\n")
	for _, ep := range endpoints {
		fmt.Fprintf(b, "| %s |", ep)
		for _, n := range names {
			l := r.Targets[n].Lifecycle.Latency[ep]
			fmt.Fprintf(b, " %.2f / %.2f / %.2f |", l.P50, l.P95, l.P99)
		}
		b.WriteString("\n")
	}

	if t := r.Targets[TargetDynamo]; t != nil && t.Lifecycle.PerJob != nil {
		p := t.Lifecycle
		b.WriteString("\n### DynamoDB capacity per job, by function (DynamoDB Local's ReturnConsumedCapacity=INDEXES, with the service's billing rules applied: docs/cost.md)\n\n")
		b.WriteString("| function | calls/job | RCU/job | WCU/job | of which GSI WCU |\n|---|---:|---:|---:|---:|\n")
		fns := make([]string, 0, len(p.Capacity))
		for fn := range p.Capacity {
			fns = append(fns, fn)
		}
		slices.Sort(fns)
		n := float64(p.Jobs)
		for _, fn := range fns {
			c := p.Capacity[fn]
			fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f |\n", fn, float64(c.Calls)/n, c.ReadUnits/n, c.WriteUnits/n, c.IndexWrite/n)
		}
		fmt.Fprintf(b, "| **total** | %.2f | %.2f | %.2f | %.2f |\n", p.CallsPerJob, p.PerJob.ReadUnits, p.PerJob.WriteUnits, p.PerJob.IndexWrite)
	}

}

// resultsTable is the results phase: the results GET's capacity per job
// at each deadline.
func (r *Report) resultsTable(b *strings.Builder) {
	d := r.Targets[TargetDynamo]
	if d == nil || len(d.Results) == 0 {
		return
	}
	b.WriteString("\n### The results GET by job deadline (DynamoDB; every site polls results until its job is listed)\n\n")
	b.WriteString("| job deadline | jobs | failed | jobs/s | results DynamoDB calls/job | results RCU/job |\n|---|---:|---:|---:|---:|---:|\n")
	for _, pt := range d.Results {
		fmt.Fprintf(b, "| %s | %d | %d | %.1f | %.2f | %.2f |\n", deadlineText(pt.DeadlineMs), pt.Phase.Jobs, pt.Phase.Failed, pt.Phase.JobsPerSecond, pt.CallsPerJob, pt.RCUPerJob)
	}
}

func deadlineText(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

func (r *Report) targetNames() []string {
	var out []string
	for _, n := range []string{TargetMemory, TargetMemoryAPIGW, TargetDynamo, TargetReference} {
		if r.Targets[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

func (r *Report) hasDepth() bool {
	for _, t := range r.Targets {
		if len(t.Depth) > 0 {
			return true
		}
	}
	return false
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Goals are the targets the bench holds the relay to; verdicts prints each
// beside what this run measured. The function size and init goals are what
// calling every AWS service through the SDK's own client costs (its
// packages linked, each client built on first use): a binary of at most
// 16 MB and an init of at most twice hello-world's. Tighter goals would
// have to be bought back with hand-written requests, which must then be
// kept right by hand as the services change.
const (
	goalMemoryOverReference = 3.0
	goalDeepOverReference   = 1.0
	goalClaimGrowth         = 1.1
	goalWCUPerJob           = 20.0
	// goalResultsOverDeadline: the results GET's cost per job is flat in
	// the deadline, so a long deadline costs at most half again a short.
	goalResultsOverDeadline = 1.5
	goalFunctionBytes       = 16_000_000
	goalInitOverHello       = 2.0
	// One site as large as the fleet's goals: a million devices
	// consenting to it, idle, or 10,000 of its jobs a second, with no
	// partition past half its limit.
	goalOneSiteDevices = 1_000_000
	goalOneSiteJobs    = 10_000
	goalPartitionShare = 0.5
)

// verdicts is the run's answers to the questions the bench exists for,
// first, each with its goal.
func (r *Report) verdicts(b *strings.Builder) {
	type row struct {
		what, measured, goal string
		met                  bool
	}
	var rows []row
	for _, x := range r.Ratios {
		if x.Name == fmt.Sprintf("jobs/s %s / %s, median of rounds", TargetMemory, TargetReference) {
			rows = append(rows, row{"memory (plain net/http) / reference, jobs/s, median of rounds", fmt.Sprintf("%.2f×", x.Value), fmt.Sprintf("≥ %.0f×", goalMemoryOverReference), x.Value >= goalMemoryOverReference})
		}
	}
	if m, ref := r.Targets[TargetMemory], r.Targets[TargetReference]; m != nil && ref != nil && m.Lifecycle.ServerCPUMsPerJob > 0 {
		rows = append(rows, row{"server CPU per job, reference / memory (each process's own accounting; context, not a goal)",
			fmt.Sprintf("%.2f× (%.2f / %.2f ms)", ref.Lifecycle.ServerCPUMsPerJob/m.Lifecycle.ServerCPUMsPerJob, ref.Lifecycle.ServerCPUMsPerJob, m.Lifecycle.ServerCPUMsPerJob), "–", true})
	}
	if d, ref := r.Targets[TargetDynamo], r.Targets[TargetReference]; d != nil && ref != nil && len(d.Depth) > 0 && len(d.Depth) == len(ref.Depth) {
		last := len(d.Depth) - 1
		if y := ref.Depth[last].Phase.JobsPerSecond; y > 0 {
			v := d.Depth[last].Phase.JobsPerSecond / y
			rows = append(rows, row{fmt.Sprintf("dynamodb at %d queued / reference at %d, jobs/s", d.Depth[last].Queued, ref.Depth[last].Queued), fmt.Sprintf("%.2f×", v), fmt.Sprintf("≥ %.0f×", goalDeepOverReference), v >= goalDeepOverReference})
		}
		if len(d.Depth) >= 2 {
			first := d.Depth[0]
			rows = append(rows, row{fmt.Sprintf("dynamodb claim p50 at %d / at %d queued", d.Depth[last].Queued, first.Queued), fmt.Sprintf("%.2f×", d.ClaimGrowth), fmt.Sprintf("≤ %.1f×", goalClaimGrowth), d.ClaimGrowth <= goalClaimGrowth})
			if a, z := first.ClaimCapacity, d.Depth[last].ClaimCapacity; a != nil && z != nil && a.ReadUnits > 0 && a.WriteUnits > 0 {
				g := max(z.ReadUnits/a.ReadUnits, z.WriteUnits/a.WriteUnits)
				rows = append(rows, row{"dynamodb claim capacity (RCU and WCU), deepest / shallowest, the larger", fmt.Sprintf("%.2f×", g), fmt.Sprintf("≤ %.1f×", goalClaimGrowth), g <= goalClaimGrowth})
			}
		}
	}
	if d := r.Targets[TargetDynamo]; d != nil && d.Lifecycle.PerJob != nil {
		w := d.Lifecycle.PerJob.WriteUnits
		// The job's end (the scheduled sweep deleting its item and its
		// ciphertext, a minute past the deadline) falls after the phase and
		// is not in this figure: the store's LifecycleCapacity benchmark
		// measures it (docs/cost.md).
		rows = append(rows, row{"WCU per small job, enqueue to result and the in-line sweeps, on the service's billing rules (RCU beside it; the end's deletes: docs/cost.md)", fmt.Sprintf("%.1f WCU, %.1f RCU", w, d.Lifecycle.PerJob.ReadUnits), fmt.Sprintf("≤ %.0f WCU", goalWCUPerJob), w <= goalWCUPerJob})
	}
	if d := r.Targets[TargetDynamo]; d != nil && len(d.Results) >= 2 {
		first, last := d.Results[0], d.Results[len(d.Results)-1]
		if first.RCUPerJob > 0 {
			v := last.RCUPerJob / first.RCUPerJob
			rows = append(rows, row{fmt.Sprintf("dynamodb results RCU per job, %s deadline / %s, a GET-polling site", deadlineText(last.DeadlineMs), deadlineText(first.DeadlineMs)),
				fmt.Sprintf("%.2f× (%.2f / %.2f)", v, last.RCUPerJob, first.RCUPerJob), fmt.Sprintf("≤ %.1f×", goalResultsOverDeadline), v <= goalResultsOverDeadline})
		}
	}
	if d := r.Targets[TargetDynamo]; d != nil && d.Heat != nil && d.Heat.OneSite != nil {
		sh := d.Heat.OneSite
		if one := d.OneSite; one != nil && one.Idle != nil {
			v, text := shareAt(sh.IdleGoal, sh.IdleDevices, "devices")
			rows = append(rows, row{fmt.Sprintf("one site with %s idle consenting devices (default heartbeat), polling as a stock site, puts no partition above %.0f%%: the hottest key's share of its limit", grouped(goalOneSiteDevices), goalPartitionShare*100),
				text, fmt.Sprintf("≤ %.0f%%", goalPartitionShare*100), v <= goalPartitionShare})
		}
		v, text := shareAt(sh.JobsGoal, sh.JobsPerSecond, "jobs/s")
		rows = append(rows, row{fmt.Sprintf("one site at %s jobs/s, polling as a stock site, puts no partition above %.0f%%: the hottest key's share of its limit", grouped(goalOneSiteJobs), goalPartitionShare*100),
			text, fmt.Sprintf("≤ %.0f%%", goalPartitionShare*100), v <= goalPartitionShare})
	}
	if cs := r.ColdStart; cs != nil && cs.Error == "" && len(cs.Functions) > 1 {
		// No function calls anything during init: the key reads and the
		// clock's calibration are made by the first request, so the first
		// invoke of those that read a key beside it, as context.
		var biggest int64
		var worst, slowestFirst string
		var worstRatio, slowestFirstMs float64
		for _, f := range cs.Functions[1:] {
			biggest = max(biggest, f.Arm64Bytes)
			if f.InitRatioMedian > worstRatio {
				worstRatio, worst = f.InitRatioMedian, f.Name
			}
			if f.FirstReads != "" && f.FirstInvokeMedianMs > slowestFirstMs {
				slowestFirstMs, slowestFirst = f.FirstInvokeMedianMs, f.Name
			}
		}
		rows = append(rows,
			row{"largest function binary (linux/arm64, as deployed)", fmt.Sprintf("%.2f MB", float64(biggest)/1e6), fmt.Sprintf("≤ %d MB", goalFunctionBytes/1_000_000), biggest <= goalFunctionBytes},
			row{"init / hello-world, the worst function's median of interleaved pairs", fmt.Sprintf("%.2f× (%s)", worstRatio, worst), fmt.Sprintf("≤ %.1f×", goalInitOverHello), worstRatio <= goalInitOverHello})
		if slowestFirst != "" {
			rows = append(rows, row{"first invoke of those that read a key from SSM on it, the slowest median (context: the round trip moved out of init, to moto here)",
				fmt.Sprintf("%.1f ms (%s; hello-world %.1f ms)", slowestFirstMs, slowestFirst, cs.Functions[0].FirstInvokeMedianMs), "–", false})
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Verdicts\n\n| question | measured | goal | met |\n|---|---:|---:|---|\n")
	for _, x := range rows {
		met := "no"
		if x.goal == "–" {
			met = "–"
		} else if x.met {
			met = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", x.what, x.measured, x.goal, met)
	}
	b.WriteString("\n")
}

// shareAt is the hottest key's share of its partition's limit at a
// goal's load (g), with the text the verdict prints, naming where the
// first key saturates (s); 0 when no key grows with the load.
func shareAt(g *KeyShare, s *Saturation, unit string) (float64, string) {
	if g == nil {
		return 0, "0% (no key grows with it)"
	}
	text := fmt.Sprintf("%.1f%% (`%s` %s", g.Share*100, g.Key, limitName(g.Reads))
	if s != nil {
		text += fmt.Sprintf("; the first key at its limit: `%s` %s, from %.0f %s", s.Key, limitName(s.Reads), s.At, unit)
	}
	return g.Share, text + ")"
}

// heatTables is the hottest partition keys and where the first of them
// reaches DynamoDB's per-partition limits, for the fleet and for one site.
func (t *TargetReport) heatTables(b *strings.Builder) {
	h := t.Heat
	if len(h.Keys) > 0 {
		idle := "no idle phase"
		if p := t.Idle; p != nil {
			idle = idleText(p)
		}
		fmt.Fprintf(b, "\n### Hottest DynamoDB partition keys (per job of the lifecycle phase; per daemon-second of the idle phase: %s)\n\n", idle)
		keyTable(b, h.Keys)
	}
	if o := h.OneSite; o != nil && t.OneSite != nil {
		idle := "no idle phase"
		if p := t.OneSite.Idle; p != nil {
			idle = idleText(p)
		}
		fmt.Fprintf(b, "\n### Hottest DynamoDB partition keys of one site (a stack of its own, every daemon consenting to `%s` and every job its; shard families spread over their shards: per job of %d jobs, the site's polls apart; per daemon-second of the idle phase: %s)\n\n",
			o.SiteID, t.OneSite.Lifecycle.Jobs, idle)
		keyTable(b, o.Keys)
		if len(o.AtGoal) > 0 {
			fmt.Fprintf(b, "\nThe same site at %s jobs/s, polling pending and results every %s as a stock site does (the keys that grow with the site; a second of each):\n\n", grouped(goalOneSiteJobs), pollEvery)
			b.WriteString("| key | RCU/s | WCU/s | share of the partition's limit |\n|---|---:|---:|---:|\n")
			for _, k := range o.AtGoal {
				fmt.Fprintf(b, "| `%s` | %.1f | %.1f | %.1f%% |\n", k.Key, k.PerSecond.ReadUnits, k.PerSecond.WriteUnits, load(k.PerSecond)*100)
			}
		}
	}
	b.WriteString("\n| load | first key to reach a partition's limit (3,000 RCU/s, 1,000 WCU/s) | at |\n|---|---|---:|\n")
	if s := h.IdleDaemons; s != nil {
		fmt.Fprintf(b, "| idle daemons at the default heartbeat | `%s` (%s) | %.0f daemons |\n", s.Key, limitName(s.Reads), s.At)
	}
	for _, s := range h.JobsPerSecond {
		sites := "sites"
		if s.Sites == 1 {
			sites = "site"
		}
		fmt.Fprintf(b, "| jobs/s spread over %d %s | `%s` (%s) | %.0f jobs/s |\n", s.Sites, sites, s.Key, limitName(s.Reads), s.At)
	}
	if o := h.OneSite; o != nil {
		if s := o.IdleDevices; s != nil {
			fmt.Fprintf(b, "| one site: idle devices consenting to it, at the default heartbeat | `%s` (%s) | %.0f devices |\n", s.Key, limitName(s.Reads), s.At)
		}
		if s := o.JobsPerSecond; s != nil {
			fmt.Fprintf(b, "| one site: its jobs/s | `%s` (%s) | %.0f jobs/s |\n", s.Key, limitName(s.Reads), s.At)
		}
	}
}

// grouped is n with its thousands separated by commas.
func grouped(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func idleText(p *IdlePhase) string {
	return fmt.Sprintf("%d daemons for %.0f s at the default %.0f s heartbeat, %d heartbeats and %d empty claims", p.Daemons, p.Seconds, idleHeartbeat.Seconds(), p.Heartbeats, p.Claims)
}

// keyTable is the hottest keys, one a row.
func keyTable(b *strings.Builder, keys []KeyHeat) {
	b.WriteString("| key | scope | RCU/job | WCU/job | RCU/idle daemon-s | WCU/idle daemon-s |\n|---|---|---:|---:|---:|---:|\n")
	for _, k := range keys {
		fmt.Fprintf(b, "| `%s` | %s | %.3f | %.3f | %.4f | %.4f |\n", k.Key, k.Scope, k.PerJob.ReadUnits, k.PerJob.WriteUnits, k.PerDaemonSecond.ReadUnits, k.PerDaemonSecond.WriteUnits)
	}
}

func limitName(reads bool) string {
	if reads {
		return "reads"
	}
	return "writes"
}
