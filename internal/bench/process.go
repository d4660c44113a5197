package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"golang.org/x/sys/unix"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

// TargetEnv set to 1 in a process's environment marks it as a bench target
// started by the driver (TargetMain): a test binary re-executes itself
// this way, the CLI has its own subcommand.
const TargetEnv = "BYORELAY_BENCH_TARGET"

// ProfileEnv names a directory: a memory target started with it set writes
// its CPU profile there (<kind>-<pid>.pprof) when it stops, for `go tool
// pprof` (docs/performance.md). The driver's environment passes through to
// its targets, so `BYORELAY_BENCH_PROFILE=dir byorelay bench …` profiles
// every memory target of the run, and the driver itself (driver-<pid>.pprof,
// the whole run).
const ProfileEnv = "BYORELAY_BENCH_PROFILE"

// TargetMain serves one target in this process until in closes:
// `byorelay bench-target -kind memory|memory-apigw|dynamodb -projection file
// [-endpoint DynamoDB Local]`. It
// writes {"event":"listening","origin":...} as its first line, the way
// localtest/refrelay/relay.mjs announces the reference, so the driver
// treats every process target alike. A target in its own process keeps
// the driver's goroutines, allocations and GC off the server's CPU, and
// its CPU time is its own (cpuSeconds).
func TargetMain(args []string, in io.Reader, out io.Writer) int {
	fs := flag.NewFlagSet("byorelay bench-target", flag.ContinueOnError)
	kind := fs.String("kind", TargetMemory, "memory (relay on plain net/http, as `serve --store memory` would), memory-apigw (behind the local API server) or dynamodb (the local stack, as `serve` runs it)")
	path := fs.String("projection", "", "the projection fixture (JSON)")
	endpoint := fs.String("endpoint", "", "DynamoDB Local's endpoint (kind dynamodb)")
	withGrants := fs.Bool("grants", false, "sign a grant for every claimed job with a fresh control-plane key")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if dir := os.Getenv(ProfileEnv); dir != "" {
		stop, err := startProfile(dir, *kind)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-target: %v\n", err)
			return 1
		}
		defer stop()
	}
	var author *grants.Author
	if *withGrants {
		seed, err := grants.NewSeed()
		if err == nil {
			author, err = grants.New(seed, grants.Options{})
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-target: %v\n", err)
			return 1
		}
	}
	if err := serveTarget(*kind, *path, *endpoint, author, in, out); err != nil {
		fmt.Fprintf(os.Stderr, "bench-target: %v\n", err)
		return 1
	}
	return 0
}

// startProfile starts the CPU profile of this target; stop writes it.
func startProfile(dir, kind string) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", kind, os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func serveTarget(kind, path, endpoint string, author *grants.Author, in io.Reader, out io.Writer) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var fixture projection.Fixture
	if err := json.Unmarshal(raw, &fixture); err != nil {
		return err
	}
	var h http.Handler
	switch kind {
	case TargetMemory, TargetMemoryAPIGW:
		if h, err = memoryHandler(kind, fixture, author); err != nil {
			return err
		}
	case TargetDynamo:
		if h, err = dynamoHandler(context.Background(), endpoint, fixture, author); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	srv, err := serve(h)
	if err != nil {
		return err
	}
	defer srv.close()
	if err := json.NewEncoder(out).Encode(map[string]string{"event": "listening", "origin": srv.url}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until the driver closes our stdin
	return nil
}

// memoryHandler is the relay over the memory store, on plain net/http or
// behind the local API server.
func memoryHandler(kind string, fixture projection.Fixture, author *grants.Author) (http.Handler, error) {
	proj, err := projection.New(fixture)
	if err != nil {
		return nil, err
	}
	st := memory.New(store.Options{})
	cfg := relay.Config{Store: st, Pairing: st, Projection: relay.NewStaticProjection(proj)}
	if author != nil {
		cfg.ControlPlanePublic, cfg.AuthorGrant = author.Public(), author.Grant
	}
	r, err := relay.New(cfg)
	if err != nil {
		return nil, err
	}
	if kind == TargetMemoryAPIGW {
		return behindAPIServer(r)
	}
	// What `byorelay serve --store memory` serves the relay with.
	return r.HTTPHandler(), nil
}

// controlPrefix starts the paths a DynamoDB target answers for the driver
// alone, outside every measured phase: its metered capacity, and the
// background jobs to enqueue. No relay route starts with it.
const controlPrefix = "/bench-control/"

// dynamoHandler is the local stack on a table of its own, with its
// DynamoDB capacity metered by function, and the control paths beside it.
func dynamoHandler(ctx context.Context, endpoint string, fixture projection.Fixture, author *grants.Author) (http.Handler, error) {
	meter := newCapacityMeter()
	cfg := localtest.AWSConfig(endpoint)
	cfg.APIOptions = append(cfg.APIOptions, meter.apiOption)
	table := "bench-" + randomHex(6)
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), table); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	st, err := lambdafn.Open(lambdafn.Env{TableName: table, MetricsNamespace: "byorelay"},
		lambdafn.Options{AWS: &cfg, Logger: quiet, MetricsOut: io.Discard, Grants: author})
	if err != nil {
		return nil, err
	}
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: quiet})
	if _, err := admin.Import(ctx, fixture); err != nil {
		return nil, fmt.Errorf("import projection: %w", err)
	}
	api, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET "+controlPrefix+"capacity", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(meter.snapshot())
	})
	mux.HandleFunc("GET "+controlPrefix+"keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(meter.snapshotKeys())
	})
	mux.HandleFunc("GET "+controlPrefix+"polls", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(meter.snapshotPolls())
	})
	// The same items and index entries a site's enqueue makes, through the
	// store's own Enqueue, without a signature per job.
	mux.HandleFunc("POST "+controlPrefix+"enqueue", func(w http.ResponseWriter, req *http.Request) {
		var jobs []store.EnqueueInput
		if err := json.NewDecoder(req.Body).Decode(&jobs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err := inParallel(req.Context(), 0, len(jobs), nil, func(ctx context.Context, n int) error {
			_, err := st.Store.Enqueue(ctx, jobs[n])
			return err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux, nil
}

// behindAPIServer is the relay behind the local API server (routing,
// payload 2.0 events crossing JSON, Lambda's limits), as `byorelay serve`
// runs every function: its overhead is the difference from the relay on
// plain net/http.
func behindAPIServer(r *relay.Relay) (http.Handler, error) {
	routes, err := apiserver.RoutesFromTemplate(byorelay.Template)
	if err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		raw, err := container.FromAPIGateway(ev)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest, Body: `{"error":"bad-request"}`}, nil
		}
		resp := r.Handle(ctx, relay.Request(raw))
		return container.ToAPIGateway(container.Response{Status: resp.Status, Header: resp.Header, Body: resp.Body}), nil
	}
	handlers := map[string]apiserver.Handler{}
	for _, rt := range routes {
		handlers[rt.Function] = handle
	}
	return apiserver.New(apiserver.Config{Routes: routes, Handlers: handlers})
}

// processTarget is a relay in a process of its own, announced by a
// "listening" line on its stdout and stopped by closing its stdin: the
// reference relay in Node, the memory targets and the DynamoDB target.
type processTarget struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	dir   string
	// control: the process answers controlPrefix paths (the DynamoDB
	// target).
	control bool
}

func startProcess(ctx context.Context, cmd *exec.Cmd, dir string) (*processTarget, error) {
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	t := &processTarget{cmd: cmd, stdin: stdin, done: make(chan struct{}), dir: dir}
	go func() { _ = cmd.Wait(); close(t.done) }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		var ev struct {
			Event  string `json:"event"`
			Origin string `json:"origin"`
		}
		if !ok || json.Unmarshal([]byte(l), &ev) != nil || ev.Event != "listening" {
			t.close()
			return nil, fmt.Errorf("target did not start: %q", l)
		}
		t.url = ev.Origin
		return t, nil
	case <-time.After(60 * time.Second):
		t.close()
		return nil, errors.New("target did not start within 60 s")
	case <-ctx.Done():
		t.close()
		return nil, ctx.Err()
	}
}

func (t *processTarget) origin() string { return t.url }

// capacity is what the target's meter has counted so far, or nil for a
// target without DynamoDB (or one that cannot say: the phase then reports
// no capacity rather than a wrong one).
func (t *processTarget) capacity() map[string]Capacity { return t.meterRead("capacity") }

// keyCapacity is the same by partition key.
func (t *processTarget) keyCapacity() map[string]Capacity { return t.meterRead("keys") }

// pollCapacity is the part of keyCapacity the site's polls spent, by
// pollKey.
func (t *processTarget) pollCapacity() map[string]Capacity { return t.meterRead("polls") }

func (t *processTarget) meterRead(what string) map[string]Capacity {
	if !t.control {
		return nil
	}
	resp, err := http.Get(t.url + controlPrefix + what)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var c map[string]Capacity
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&c) != nil {
		return nil
	}
	return c
}

// cpuSeconds is the process's CPU so far, every thread of it, including
// threads that have exited: the kernel's scheduler accounting of the
// process, in nanoseconds, read through the process's CPU-time clock. The
// utime and stime of /proc/<pid>/stat count whole 10 ms ticks instead, so
// a phase shorter than a tick reads as no CPU at all and every phase is
// off by up to a tick at each end. Once the process has been reaped, the
// clock is gone and its pid may be another process's: its rusage, exact
// for the whole process, is the answer then.
func (t *processTarget) cpuSeconds() (float64, bool) {
	select {
	case <-t.done:
		st := t.cmd.ProcessState
		return (st.UserTime() + st.SystemTime()).Seconds(), true
	default:
	}
	d, err := processCPU(t.cmd.Process.Pid)
	if err != nil {
		return 0, false
	}
	return d.Seconds(), true
}

// processCPU reads another process's CPU-time clock, the clock id
// clock_getcpuclockid(3) gives for pid on Linux: the pid's complement
// shifted by three bits, with CPUCLOCK_SCHED (2) for the scheduler's
// nanosecond runtime, summed over the process's threads, living and
// exited. Any process may read it; it fails for a pid that is not a
// running process's leader.
func processCPU(pid int) (time.Duration, error) {
	const cpuClockSched = 2
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid)<<3|cpuClockSched, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// ownCPUSeconds is this process's user and system CPU so far: the
// driver's (every target runs in a process of its own).
func ownCPUSeconds() (float64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime), true
}

func (t *processTarget) close() {
	_ = t.stdin.Close()
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
}

// preload enqueues over HTTP, signed by the sites, except into a target
// with control paths, which is sent the jobs in batches to enqueue through
// its store.
func (t *processTarget) preload(ctx context.Context, w *world, from, to int, progress io.Writer) error {
	if !t.control {
		return preloadHTTP(ctx, t.url, w, from, to, progress)
	}
	const batch = 2000
	for lo := from; lo < to; lo += batch {
		jobs := make([]store.EnqueueInput, 0, batch)
		for n := lo; n < min(lo+batch, to); n++ {
			jobs = append(jobs, background(w, n))
		}
		body, err := json.Marshal(jobs)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url+controlPrefix+"enqueue", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("preload: %w", err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("preload: %s: %s", resp.Status, msg)
		}
		if progress != nil && lo > from && lo%10_000 == 0 {
			fmt.Fprintf(progress, "  preloaded %d of %d\n", lo, to)
		}
	}
	return nil
}
