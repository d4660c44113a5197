package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/byorelay/byorelay/internal/bench"
	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/localtest"
)

// runBench is `byorelay-local bench`: the lifecycle workload against byorelay on
// DynamoDB Local, on the memory store and against the reference relay,
// then the queue-depth phase and the functions' size and cold start. It
// writes the report as JSON and as Markdown tables.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("byorelay-local bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Sites, "sites", cfg.Sites, "sites (S)")
	fs.IntVar(&cfg.Daemons, "daemons", cfg.Daemons, "daemons (D), each its own owner, one job at a time: the concurrency")
	fs.IntVar(&cfg.Jobs, "jobs", cfg.Jobs, "measured lifecycles per target (at most; see -phase-limit)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured lifecycles per target first")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds the lifecycle jobs are split into")
	fs.DurationVar(&cfg.PhaseLimit, "phase-limit", cfg.PhaseLimit, "stop starting lifecycle jobs on a target after this long (0: none)")
	fs.DurationVar(&cfg.DepthLimit, "depth-limit", cfg.DepthLimit, "the same for each depth phase")
	depths := fs.String("depths", joinInts(cfg.Depths), "background queue depths of the scale phase, comma-separated (\"\" skips it)")
	fs.IntVar(&cfg.DepthJobs, "depth-jobs", cfg.DepthJobs, "lifecycles measured at each depth")
	targets := fs.String("targets", strings.Join(cfg.Targets, ","), "targets: memory, memory-apigw, dynamodb, reference")
	fs.DurationVar(&cfg.JobDeadline, "job-deadline", cfg.JobDeadline, "each job's deadline from enqueue (done jobs stay in results until then)")
	fs.IntVar(&cfg.ResultsJobs, "results-jobs", cfg.ResultsJobs, "lifecycles on dynamodb at each results-phase deadline (0 skips the phase)")
	fs.DurationVar(&cfg.ResultsLimit, "results-limit", cfg.ResultsLimit, "stop starting jobs at each results-phase deadline after this long")
	resultsDeadlines := fs.String("results-deadlines", joinDurations(cfg.ResultsDeadlines), "job deadlines of the results phase, comma-separated")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle phase on dynamodb: every daemon heartbeating and claiming at the default period with nothing queued, this long (0 skips it)")
	fs.IntVar(&cfg.OneSiteJobs, "onesite-jobs", cfg.OneSiteJobs, "one-site phase on a dynamodb stack of its own, every daemon consenting to one site: its lifecycles (at most; 0 skips the phase)")
	fs.DurationVar(&cfg.OneSiteIdle, "onesite-idle", cfg.OneSiteIdle, "the one-site phase's idle phase first, this long (0 skips it)")
	fs.DurationVar(&cfg.OneSiteLimit, "onesite-limit", cfg.OneSiteLimit, "stop starting one-site lifecycles after this long")
	fs.BoolVar(&cfg.Grants, "grants", cfg.Grants, "byorelay's targets sign a grant for every claimed job, every consent mapped (the reference signs none)")
	fs.BoolVar(&cfg.ColdStart, "coldstart", cfg.ColdStart, "build every function and measure size and init under the emulator")
	fs.IntVar(&cfg.ColdStartRuns, "coldstart-runs", cfg.ColdStartRuns, "interleaved cold-start pairs (hello-world, function) per function")
	fs.StringVar(&cfg.DynamoEndpoint, "ddb-endpoint", os.Getenv(localtest.EnvDynamoEndpoint), "use this DynamoDB endpoint instead of starting DynamoDB Local")
	out := fs.String("out", ".cache/bench/bench.json", "the JSON report; the Markdown tables go beside it (.md)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay-local bench [flags]\n\nDrives the job lifecycle over HTTP against byorelay on DynamoDB Local, on the\nmemory store and against the reference relay, and reports throughput, latency,\nDynamoDB capacity per job and its hottest partition keys, claim at queue\ndepth, and function size and init.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if cfg.Depths, err = parseInts(*depths); err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: --depths: %v\n", err)
		return 2
	}
	if cfg.ResultsDeadlines, err = parseDurations(*resultsDeadlines); err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: --results-deadlines: %v\n", err)
		return 2
	}
	cfg.Targets = nil
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Targets = append(cfg.Targets, t)
		}
	}
	if cfg.RepoRoot, err = repo.Root(); err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: %v\n", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: %v\n", err)
		return 1
	}
	cfg.TargetCommand = []string{exe, "bench-target"}
	cfg.Progress = stdout
	fmt.Fprintf(stdout, "byorelay-local bench %s\n", strings.Join(args, " "))
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: %v\n", err)
		return 1
	}
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(cfg.RepoRoot, path)
	}
	if err := rep.WriteJSON(path); err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: %v\n", err)
		return 1
	}
	md := strings.TrimSuffix(path, filepath.Ext(path)) + ".md"
	if err := os.WriteFile(md, []byte(rep.Markdown()), 0o644); err != nil {
		fmt.Fprintf(stderr, "byorelay-local bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\n%s\nwrote %s and %s (%s)\n", rep.Markdown(), path, md, time.Duration(rep.Seconds*float64(time.Second)).Round(time.Second))
	return 0
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Second {
			return nil, fmt.Errorf("%q is not a deadline of a second or more", f)
		}
		out = append(out, d)
	}
	return out, nil
}
