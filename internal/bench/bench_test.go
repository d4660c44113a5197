package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// TestMain doubles as a memory target's process: the smoke run starts this
// test binary again with TargetEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(TargetEnv) == "1" {
		os.Exit(TargetMain(os.Args[1:], os.Stdin, os.Stdout))
	}
	localtest.Main(m)
}

// The smoke run CI makes: every target, a few jobs, one small depth. It
// asserts that the run completes, that every lifecycle succeeded (each one
// opened both envelopes), that DynamoDB capacity was metered, and that the
// report is written; never a speed.
func TestSmokeRunCompletesAndWritesItsReport(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := Config{
		Sites: 2, Daemons: 2, Jobs: 4, Warmup: 1,
		Depths: []int{20}, DepthJobs: 2,
		Targets: []string{TargetMemory, TargetMemoryAPIGW, TargetDynamo, TargetReference},
		Rounds:  2,
		// This binary, as a target process (TestMain).
		TargetCommand: []string{os.Args[0]},
		JobDeadline:   30 * time.Second,
		RepoRoot:      root,
		// The test binary's DynamoDB Local: started once, stopped by Main.
		DynamoEndpoint: localtest.DynamoEndpoint(t),
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cfg.Targets {
		tr := rep.Targets[name]
		if tr == nil {
			t.Fatalf("no report for target %s", name)
		}
		if tr.Lifecycle.Jobs != cfg.Jobs || tr.Lifecycle.Failed != 0 {
			t.Errorf("%s: %d of %d jobs completed, %d failed: %v", name, tr.Lifecycle.Jobs, cfg.Jobs, tr.Lifecycle.Failed, tr.Lifecycle.Errors)
		}
		for _, ep := range []string{"enqueue", "claim", "pending", "payload", "fetch", "result", "results", "job"} {
			if tr.Lifecycle.Latency[ep].Count < cfg.Jobs {
				t.Errorf("%s: %d %s samples, want at least %d", name, tr.Lifecycle.Latency[ep].Count, ep, cfg.Jobs)
			}
		}
		if name == TargetMemory || name == TargetMemoryAPIGW {
			continue // not in the depth phase
		}
		if len(tr.Depth) != 1 || tr.Depth[0].Phase.Jobs != cfg.DepthJobs {
			t.Errorf("%s: depth phase %+v", name, tr.Depth)
		}
	}
	dyn := rep.Targets[TargetDynamo].Lifecycle
	if dyn.PerJob == nil || dyn.PerJob.WriteUnits <= 0 || dyn.PerJob.ReadUnits <= 0 {
		t.Errorf("DynamoDB capacity per job not metered: %+v", dyn.PerJob)
	}
	if c := rep.Targets[TargetDynamo].Depth[0].ClaimCapacity; c == nil || c.ReadUnits <= 0 {
		t.Errorf("claim capacity at depth not metered: %+v", c)
	}
	if rep.Targets[TargetMemory].Lifecycle.Capacity != nil {
		t.Error("the memory target reported DynamoDB capacity")
	}

	dir := t.TempDir()
	if err := rep.WriteJSON(filepath.Join(dir, "bench.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.md"), []byte(rep.Markdown()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bench.json", "bench.md"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// The DynamoDB target is a process of its own, like every target: its
// server's CPU is its own, and the capacity it meters and the background
// jobs it enqueues cross its control paths.
func TestTheDynamoDBTargetRunsInAProcessOfItsOwn(t *testing.T) {
	w, err := newWorld(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := startDynamo(t.Context(), []string{os.Args[0]}, localtest.DynamoEndpoint(t), w)
	if err != nil {
		t.Fatal(err)
	}
	defer pt.close()
	if pt.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the DynamoDB target runs in the driver's process")
	}
	before := pt.capacity()
	cpuBefore, ok := pt.cpuSeconds()
	if !ok {
		t.Fatal("no CPU reading for the running target")
	}
	if err := pt.preload(t.Context(), w, 0, 3, nil); err != nil {
		t.Fatal(err)
	}
	after := pt.capacity()
	if after == nil || after[notFunction].WriteUnits < before[notFunction].WriteUnits+3 {
		t.Fatalf("three enqueues metered as %+v (before %+v)", after[notFunction], before[notFunction])
	}
	assertOwnCPU(t, pt, cpuBefore, "three enqueues")
}

// Server CPU comes from the kernel's accounting of the target's process:
// a process that has burnt CPU reports it.
func TestAProcessTargetReportsItsOwnCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo '{"event":"listening","origin":"http://127.0.0.1:1"}'; cat`)
	pt, err := startProcess(context.Background(), cmd, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pt.close()
	assertOwnCPU(t, pt, 0, "a shell loop")
}

// assertOwnCPU checks that the running target's CPU has grown past
// before by the work it was just given, and that the reading is the
// target's own process: it never exceeds what the kernel charges the
// process when it is reaped (rusage, in microseconds, hence the 2 µs
// the truncation of its user and system parts can lose). Accounting in
// nanoseconds makes any work at all count, however fast the machine; a
// reading in 10 ms ticks would see none for work shorter than a tick.
func assertOwnCPU(t *testing.T, pt *processTarget, before float64, work string) {
	t.Helper()
	running, ok := pt.cpuSeconds()
	if !ok || running <= before {
		t.Fatalf("cpuSeconds = %v, %v after %s; want more than %v", running, ok, work, before)
	}
	pt.close()
	if pt.cmd.ProcessState == nil {
		t.Fatal("the target was not reaped")
	}
	exited := (pt.cmd.ProcessState.UserTime() + pt.cmd.ProcessState.SystemTime()).Seconds()
	if running > exited+2e-6 {
		t.Fatalf("cpuSeconds read %v while running, more than the %v the process was charged in all", running, exited)
	}
	if final, ok := pt.cpuSeconds(); !ok || final != exited {
		t.Fatalf("cpuSeconds = %v, %v once reaped; want its rusage %v", final, ok, exited)
	}
}

// resultRow reads the same row decoding the whole answer does, whichever
// of the answer's rows it is, and declines what it cannot find.
func TestResultRowIsTheRowTheWholeAnswerHolds(t *testing.T) {
	rows := []protocol.SiteResult{
		{JobID: "j1", Envelope: &protocol.SealedEnvelope{Ciphertext: "abc_-", Direction: "result", DeadlineAt: 5}, Device: &protocol.PublicIdentity{Identity: "i1"}, RunnerOwner: "o1"},
		{JobID: "j10", LeaseID: "l", Device: &protocol.PublicIdentity{Identity: "i10"}},
		{JobID: "j2", Disposition: "ok"},
	}
	raw, err := json.Marshal(protocol.SiteResultsResponse{Jobs: rows})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range rows {
		got, ok := resultRow(raw, want.JobID)
		if !ok {
			t.Fatalf("%s not found", want.JobID)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("row %s = %s, want %s", want.JobID, a, b)
		}
	}
	if _, ok := resultRow(raw, "j3"); ok {
		t.Fatal("found a job the answer does not hold")
	}
}

// A small run on the DynamoDB target with an idle phase (shorter than a
// heartbeat period: the first daemons' turns fall in it, the rest's past
// it): every call is
// counted under its partition keys, so the keys' totals add up to the
// functions' in both phases, and the hottest keys and the saturation
// figures are reported.
func TestKeyHeatAddsUpToTheFunctionsCapacity(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{
		Sites: 2, Daemons: 3, Jobs: 6, Warmup: 1, Rounds: 2,
		Targets:       []string{TargetDynamo},
		TargetCommand: []string{os.Args[0]},
		JobDeadline:   30 * time.Second,
		Idle:          3 * time.Second,
		OneSiteJobs:   4, OneSiteIdle: 3 * time.Second, OneSiteLimit: time.Minute,
		RepoRoot:       root,
		DynamoEndpoint: localtest.DynamoEndpoint(t),
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := rep.Targets[TargetDynamo]
	if tr.Lifecycle.Jobs != cfg.Jobs || tr.Lifecycle.Failed != 0 {
		t.Fatalf("%d of %d jobs, %d failed: %v", tr.Lifecycle.Jobs, cfg.Jobs, tr.Lifecycle.Failed, tr.Lifecycle.Errors)
	}
	if tr.Idle == nil || tr.Idle.Failed != 0 || tr.Idle.Heartbeats < 1 || tr.Idle.Claims < 1 || tr.Idle.Seconds != cfg.Idle.Seconds() {
		t.Fatalf("idle phase %+v", tr.Idle)
	}
	sums := func(name string, byFunction, byKey map[string]Capacity) {
		var f, k Capacity
		for _, c := range byFunction {
			f.add(c)
		}
		for _, c := range byKey {
			k.add(c)
		}
		if f.ReadUnits <= 0 || f.WriteUnits <= 0 {
			t.Errorf("%s: nothing metered by function: %+v", name, f)
		}
		if !near(f.ReadUnits, k.ReadUnits) || !near(f.WriteUnits, k.WriteUnits) || !near(f.IndexWrite, k.IndexWrite) {
			t.Errorf("%s: keys add up to %+v, functions to %+v", name, k, f)
		}
	}
	sums("lifecycle", tr.Lifecycle.Capacity, tr.Lifecycle.Keys)
	sums("idle", tr.Idle.Capacity, tr.Idle.Keys)
	if tr.Heat == nil || len(tr.Heat.Keys) == 0 || tr.Heat.IdleDaemons == nil || len(tr.Heat.JobsPerSecond) != len(heatSites) {
		t.Fatalf("heat not reported: %+v", tr.Heat)
	}
	md := rep.Markdown()
	if !strings.Contains(md, "Hottest DynamoDB partition keys") || !strings.Contains(md, tr.Heat.Keys[0].Key) {
		t.Errorf("the report has no heat table:\n%s", md)
	}
	for _, k := range tr.Heat.Keys {
		if strings.ContainsRune(k.Key, 0) {
			t.Errorf("key %q printed with a NUL", k.Key)
		}
	}
	t.Logf("hottest: %+v; idle: %+v; jobs: %+v", tr.Heat.Keys[0], *tr.Heat.IdleDaemons, tr.Heat.JobsPerSecond)

	// The one-site phase: its own stack, every job the one site's.
	one := tr.OneSite
	if one == nil || one.Lifecycle.Jobs != cfg.OneSiteJobs || one.Lifecycle.Failed != 0 || one.Idle == nil || one.Idle.Failed != 0 || one.Idle.Claims < 1 {
		t.Fatalf("one-site phase %+v", one)
	}
	if e := one.EmptyPolls; e == nil || e.Polls != emptyPolls || e.Failed != 0 || len(e.Keys) == 0 || len(one.Lifecycle.PollKeys) == 0 || one.Lifecycle.PendingRows < int64(cfg.OneSiteJobs) {
		t.Fatalf("the site's polls were not counted: empty polls %+v, lifecycle poll keys %d, pending rows %d", e, len(one.Lifecycle.PollKeys), one.Lifecycle.PendingRows)
	}
	sums("one-site lifecycle", one.Lifecycle.Capacity, one.Lifecycle.Keys)
	sums("one-site idle", one.Idle.Capacity, one.Idle.Keys)
	sh := tr.Heat.OneSite
	if sh == nil || sh.SiteID != oneSiteID || len(sh.Keys) == 0 || sh.IdleDevices == nil || sh.JobsPerSecond == nil {
		t.Fatalf("one-site heat not reported: %+v", sh)
	}
	for _, k := range sh.Keys {
		if k.Scope == "site" && !strings.Contains(k.Key, oneSiteID) {
			t.Errorf("one-site key %s is scoped to a site other than %s", k.Key, oneSiteID)
		}
	}
	for _, want := range []string{"Hottest DynamoDB partition keys of one site", "| one site: its jobs/s | `" + sh.JobsPerSecond.Key, "one site at 10,000 jobs/s, polling as a stock site, puts no partition above 50%"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	t.Logf("one site: idle devices %+v; jobs/s %+v", *sh.IdleDevices, *sh.JobsPerSecond)
}
