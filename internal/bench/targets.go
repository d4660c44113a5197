package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Target names.
const (
	TargetMemory      = "memory"
	TargetMemoryAPIGW = "memory-apigw"
	TargetDynamo      = "dynamodb"
	TargetReference   = "reference"
)

// target is one relay the workload runs against, over HTTP on loopback.
type target interface {
	origin() string
	// preload enqueues background jobs number from..to-1, spread over the
	// sites and deepOwners owners nobody claims for, due far in the future.
	preload(ctx context.Context, w *world, from, to int, progress io.Writer) error
	// capacity is DynamoDB capacity consumed so far by function; nil for a
	// target without DynamoDB.
	capacity() map[string]Capacity
	// keyCapacity is the same by partition key (partkey.Of).
	keyCapacity() map[string]Capacity
	// pollCapacity is the part of keyCapacity the site's polls (pending,
	// results) spent, by pollKey.
	pollCapacity() map[string]Capacity
	// cpuSeconds is the server's own CPU so far, when it runs in a process
	// of its own.
	cpuSeconds() (float64, bool)
	close()
}

// background is the n-th background job.
func background(w *world, n int) store.EnqueueInput {
	s := w.sites[n%len(w.sites)]
	id := fmt.Sprintf("deep-%07d", n)
	return store.EnqueueInput{ID: id, SiteID: s.id, Stub: s.stub(id, deepOwner(n), time.Now().Add(6*time.Hour).UnixMilli())}
}

// preloadConcurrency is how many background enqueues run at once.
const preloadConcurrency = 16

// inParallel runs fn(n) for n in [from, to) on preloadConcurrency
// goroutines, stopping at the first error, with a progress line every
// 10,000.
func inParallel(ctx context.Context, from, to int, progress io.Writer, fn func(ctx context.Context, n int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next = int64(from)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range preloadConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				n := next
				next++
				mu.Unlock()
				if n >= int64(to) {
					return
				}
				if progress != nil && n > int64(from) && n%10_000 == 0 {
					fmt.Fprintf(progress, "  preloaded %d of %d\n", n, to)
				}
				if err := fn(ctx, int(n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// server is an HTTP listener on a free loopback port.
type server struct {
	url string
	srv *http.Server
}

func serve(h http.Handler) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{url: "http://" + l.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *server) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// startMemory starts byorelay's relay over the memory store in a process
// of its own (TargetMain): kind TargetMemory on plain net/http, as a user
// runs it, or TargetMemoryAPIGW behind the local API server, so the
// server's share is measured rather than hidden.
func startMemory(ctx context.Context, command []string, kind string, w *world) (*processTarget, error) {
	dir, path, err := writeFixture(w)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command[0], append(command[1:], targetArgs(w, "-kind", kind, "-projection", path)...)...)
	cmd.Env = append(os.Environ(), TargetEnv+"=1")
	t, err := startProcess(ctx, cmd, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

// targetArgs are a target process's arguments: args, and -grants when the
// world signs grants.
func targetArgs(w *world, args ...string) []string {
	if w.grants {
		args = append(args, "-grants")
	}
	return args
}

// writeFixture writes the world's projection into a new directory.
func writeFixture(w *world) (dir, path string, err error) {
	fixture, err := w.fixtureJSON()
	if err != nil {
		return "", "", err
	}
	if dir, err = os.MkdirTemp("", "byorelay-bench-target-"); err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "projection.json")
	if err := os.WriteFile(path, fixture, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, path, nil
}

// startDynamo starts the local stack as `byorelay serve` runs it (every
// function's handler over one lambdafn.Stack on DynamoDB Local, behind the
// local API server, with a table of its own) in a process of its own
// (TargetMain), so its CPU is its own and the driver's is not on it. The
// process meters DynamoDB's consumed capacity by function and answers it,
// and enqueues the background jobs it is sent, on control paths outside
// any measured phase.
func startDynamo(ctx context.Context, command []string, endpoint string, w *world) (*processTarget, error) {
	dir, path, err := writeFixture(w)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command[0], append(command[1:], targetArgs(w, "-kind", TargetDynamo, "-projection", path, "-endpoint", endpoint)...)...)
	cmd.Env = append(os.Environ(), TargetEnv+"=1")
	t, err := startProcess(ctx, cmd, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t.control = true
	return t, nil
}

// startReference starts @byollm/relay 0.1.1 in memory, served by
// localtest/refrelay/relay.mjs on the same projection.
func startReference(ctx context.Context, repoRoot string, w *world) (*processTarget, error) {
	dir, path, err := writeFixture(w)
	if err != nil {
		return nil, err
	}
	node, err := localtest.NodeBinary()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(node, filepath.Join(repoRoot, "localtest", "refrelay", "relay.mjs"), "--projection", path)
	t, err := startProcess(ctx, cmd, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the reference relay (node): %w", err)
	}
	return t, nil
}

// preloadHTTP enqueues background jobs over HTTP, signed by the sites.
func preloadHTTP(ctx context.Context, origin string, w *world, from, to int, progress io.Writer) error {
	// One client (one connection) per goroutine inParallel runs, taken
	// for each enqueue and put back.
	c := newClient(origin)
	idle := make(chan *client, preloadConcurrency)
	for range preloadConcurrency {
		idle <- c.worker()
	}
	defer func() {
		for range preloadConcurrency {
			(<-idle).close()
		}
	}()
	sites := map[string]site{}
	for _, s := range w.sites {
		sites[s.id] = s
	}
	return inParallel(ctx, from, to, progress, func(ctx context.Context, n int) error {
		in := background(w, n)
		wc := <-idle
		defer func() { idle <- wc }()
		_, err := wc.siteCallTimed(ctx, sites[in.SiteID], "enqueue", protocol.EnqueueRequest{
			ProtocolVersion: protocol.ProtocolVersion, SiteID: in.SiteID, Stub: in.Stub,
		}, false)
		return err
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
