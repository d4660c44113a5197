package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/lambdafn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/relay"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

// Target names.
const (
	TargetMemory    = "memory"
	TargetDynamo    = "dynamodb"
	TargetReference = "reference"
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

// memoryTarget is byorelay's relay over the memory store, behind the same
// local API server (routing, event translation, limits) as the DynamoDB
// target: the two differ only in the store.
type memoryTarget struct {
	store *memory.Store
	srv   *server
}

func startMemory(w *world) (*memoryTarget, error) {
	st := memory.New(store.Options{})
	proj, err := projection.New(w.fixture())
	if err != nil {
		return nil, err
	}
	r, err := relay.New(relay.Config{Store: st, Pairing: st, Projection: relay.NewStaticProjection(proj)})
	if err != nil {
		return nil, err
	}
	routes, err := apiserver.RoutesFromTemplate(byorelay.Template)
	if err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		req, err := lambdafn.FromAPIGateway(ev)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest, Body: `{"error":"bad-request"}`}, nil
		}
		return lambdafn.ToAPIGateway(r.Handle(ctx, req)), nil
	}
	handlers := map[string]apiserver.Handler{}
	for _, rt := range routes {
		handlers[rt.Function] = handle
	}
	api, err := apiserver.New(apiserver.Config{Routes: routes, Handlers: handlers})
	if err != nil {
		return nil, err
	}
	srv, err := serve(api)
	if err != nil {
		return nil, err
	}
	return &memoryTarget{store: st, srv: srv}, nil
}

func (t *memoryTarget) origin() string                { return t.srv.url }
func (t *memoryTarget) capacity() map[string]Capacity { return nil }
func (t *memoryTarget) close()                        { t.srv.close() }

func (t *memoryTarget) preload(ctx context.Context, w *world, from, to int, progress io.Writer) error {
	return inParallel(ctx, from, to, progress, func(ctx context.Context, n int) error {
		_, err := t.store.Enqueue(ctx, background(w, n))
		return err
	})
}

// dynamoTarget is the local stack as `byorelay serve` runs it: every
// function's handler over one lambdafn.Stack on DynamoDB Local, behind the
// local API server, with a table of its own.
type dynamoTarget struct {
	stack *lambdafn.Stack
	meter *capacityMeter
	srv   *server
}

func startDynamo(ctx context.Context, endpoint string, w *world) (*dynamoTarget, error) {
	meter := newCapacityMeter()
	cfg := localtest.AWSConfig(endpoint)
	cfg.APIOptions = append(cfg.APIOptions, meter.apiOption)
	table := "bench-" + randomHex(6)
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), table); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	st, err := lambdafn.Open(ctx, lambdafn.Env{TableName: table, MetricsNamespace: "byorelay"},
		lambdafn.Options{AWS: &cfg, Logger: quiet, MetricsOut: io.Discard})
	if err != nil {
		return nil, err
	}
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: quiet})
	if _, err := admin.Import(ctx, w.fixture()); err != nil {
		return nil, fmt.Errorf("import projection: %w", err)
	}
	api, err := apiserver.ForStack(st, apiserver.Config{})
	if err != nil {
		return nil, err
	}
	srv, err := serve(api)
	if err != nil {
		return nil, err
	}
	return &dynamoTarget{stack: st, meter: meter, srv: srv}, nil
}

func (t *dynamoTarget) origin() string                { return t.srv.url }
func (t *dynamoTarget) capacity() map[string]Capacity { return t.meter.snapshot() }
func (t *dynamoTarget) close()                        { t.srv.close() }

// preload writes through the store's own Enqueue, concurrently: the same
// items and index entries a site's enqueue makes, without a signature per
// job.
func (t *dynamoTarget) preload(ctx context.Context, w *world, from, to int, progress io.Writer) error {
	return inParallel(ctx, from, to, progress, func(ctx context.Context, n int) error {
		_, err := t.stack.Store.Enqueue(ctx, background(w, n))
		return err
	})
}

// referenceTarget is @byollm/relay 0.1.1 in memory, served by
// localtest/refrelay/relay.mjs on the same projection.
type referenceTarget struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	dir   string
}

func startReference(ctx context.Context, repoRoot string, w *world) (*referenceTarget, error) {
	fixture, err := w.fixtureJSON()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "byorelay-bench-ref-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "projection.json")
	if err := os.WriteFile(path, fixture, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command("node", filepath.Join(repoRoot, "localtest", "refrelay", "relay.mjs"), "--projection", path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the reference relay (node): %w", err)
	}
	t := &referenceTarget{cmd: cmd, stdin: stdin, done: make(chan struct{}), dir: dir}
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
			return nil, fmt.Errorf("reference relay did not start: %q", l)
		}
		t.url = ev.Origin
		return t, nil
	case <-time.After(60 * time.Second):
		t.close()
		return nil, errors.New("reference relay did not start within 60 s")
	case <-ctx.Done():
		t.close()
		return nil, ctx.Err()
	}
}

func (t *referenceTarget) origin() string                { return t.url }
func (t *referenceTarget) capacity() map[string]Capacity { return nil }

func (t *referenceTarget) close() {
	_ = t.stdin.Close()
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	os.RemoveAll(t.dir)
}

// preload enqueues over HTTP, signed by the sites: the reference has no
// other way in.
func (t *referenceTarget) preload(ctx context.Context, w *world, from, to int, progress io.Writer) error {
	c := newClient(t.url, preloadConcurrency)
	defer c.close()
	sites := map[string]site{}
	for _, s := range w.sites {
		sites[s.id] = s
	}
	return inParallel(ctx, from, to, progress, func(ctx context.Context, n int) error {
		in := background(w, n)
		_, err := c.siteCallTimed(ctx, sites[in.SiteID], "enqueue", protocol.EnqueueRequest{
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
