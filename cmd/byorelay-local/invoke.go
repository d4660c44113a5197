package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/lambdadev"
	"github.com/byorelay/byorelay/store/dynamo"
)

const invokeUsage = `usage: byorelay-local invoke [flags] FN EVENT

Runs function FN (a directory under functions/) with the event file EVENT,
the way 'sam local invoke' would: the real bootstrap, built for this
machine, under the Lambda runtime interface emulator. HTTP events are
re-signed with the local demo keys first (signatures are only fresh for
two minutes, so a committed event cannot stay signed).

With TABLE_NAME unset it starts DynamoDB Local, creates the table and loads
the demo projection; with TABLE_NAME set (and AWS_ENDPOINT_URL_DYNAMODB for
a local table) it uses that table as it is.

A site-stack function (functions/site*, site-template.yaml) runs against
the site demo world (the demo daemon paired, demo-job-1 queued): with
TABLE_NAME unset in its own DynamoDB Local, with it set in that table of a
running 'byorelay-local site --demo'. Under the emulator moto's SSM holds the
site's keys, which the bootstrap reads as it does deployed.

flags:
`

// invokeTable is the table a self-contained invoke creates.
const invokeTable = "byorelay-invoke"

func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, invokeUsage); fs.PrintDefaults() }
	inProcess := fs.Bool("in-process", false, "run the handler in this process instead of under the emulator")
	bootstrap := fs.String("bootstrap", "", "a bootstrap already built for this machine (default: build functions/FN)")
	rie := fs.String("rie", "", "the aws-lambda-rie binary (default: .cache/bin/aws-lambda-rie, installed on first use)")
	verbose := fs.Bool("v", false, "also print the emulator's and the function's own output (its log lines, EMF\nmetrics); without it that is printed only when the invoke fails or answers 5xx")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	fn, err := lookupAnyFunction(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "byorelay-local invoke:", err)
		return 2
	}
	raw, err := os.ReadFile(fs.Arg(1))
	if err != nil {
		fmt.Fprintln(stderr, "byorelay-local invoke:", err)
		return 1
	}
	// The emulator runs in the bootstrap's directory: a path relative to
	// here would not be found from there.
	for _, p := range []*string{bootstrap, rie} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err == nil {
				_, err = os.Stat(*p)
			}
			if err != nil {
				fmt.Fprintln(stderr, "byorelay-local invoke:", err)
				return 1
			}
		}
	}
	held := &heldOutput{}
	opts := invokeOptions{inProcess: *inProcess, bootstrap: *bootstrap, rie: *rie, logs: stderr, output: held}
	if *verbose {
		opts.output = stderr
	}
	var answer []byte
	switch f := fn.(type) {
	case lambdafn.Function:
		answer, err = invoke(ctx, f, raw, opts)
	case sitefn.Function:
		answer, err = invokeSite(ctx, f, raw, opts)
	}
	if err != nil || serverError(answer) {
		held.writeTo(stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "byorelay-local invoke:", err)
		return 1
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, answer, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(answer)
	}
	pretty.WriteByte('\n')
	_, _ = stdout.Write(pretty.Bytes())
	return 0
}

// lookupAnyFunction finds name among the relay's functions (template.yaml)
// and the site stack's (site-template.yaml): a lambdafn.Function or a
// sitefn.Function.
func lookupAnyFunction(name string) (any, error) {
	if f, err := lambdafn.Lookup(name); err == nil {
		return f, nil
	}
	if f, err := sitefn.Lookup(name); err == nil {
		return f, nil
	}
	return nil, fmt.Errorf("no function %q in template.yaml or site-template.yaml", name)
}

type invokeOptions struct {
	inProcess bool
	bootstrap string
	rie       string
	// logs is told what invoke does (a build, a service started), one
	// line a step: the first build on a loaded machine is silent for a
	// minute otherwise.
	logs io.Writer
	// output takes the emulator's and the function's own output: the logs
	// with -v, else a heldOutput printed only when something failed, so
	// the answer is not under twenty lines of them.
	output io.Writer
}

// heldOutput keeps the function's output until invoke knows whether
// anyone needs to read it.
type heldOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (h *heldOutput) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.Write(p)
}

// writeTo prints what was held, under a line saying what it is.
func (h *heldOutput) writeTo(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len() > 0 {
		fmt.Fprintf(w, "the emulator's and the function's output:\n%s", h.buf.Bytes())
	}
}

// serverError reports whether answer is an HTTP function's 5xx response.
func serverError(answer []byte) bool {
	var resp struct {
		StatusCode int `json:"statusCode"`
	}
	return json.Unmarshal(answer, &resp) == nil && resp.StatusCode >= 500
}

func invoke(ctx context.Context, fn lambdafn.Function, raw []byte, opts invokeOptions) ([]byte, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	world, err := loadDemoWorld()
	if err != nil {
		return nil, err
	}
	env, stop, err := functionEnv(ctx, world, opts.logs)
	if err != nil {
		return nil, err
	}
	defer stop()
	// Each self-contained invoke starts from a table with no job in it: a
	// sample about demo-job-1 gets "unknown job", which reads like a fault.
	if os.Getenv("TABLE_NAME") == "" && fn.Name != lambdafn.Enqueue && eventMentions(raw, demo.JobID) {
		fmt.Fprintf(opts.logs, "note: this fresh table holds the demo projection and no job, so %s is unknown here; "+
			"to act on a job, invoke against make run's table (TABLE_NAME=…, events/README.md)\n", demo.JobID)
	}

	lease, err := relayLease(ctx, env)
	if err != nil {
		return nil, err
	}
	prepare := func() ([]byte, error) { return lambdadev.PrepareEvent(fn, raw, world, time.Now(), lease) }
	if opts.inProcess {
		event, err := prepare()
		if err != nil {
			return nil, err
		}
		return invokeInProcess(ctx, fn, env, event, opts.output)
	}
	answer, err := emulate(ctx, root, fn.Name, env, prepare, opts)
	if err != nil || fn.Kind != lambdafn.KindStream {
		return answer, err
	}
	// The emulator hands back the streamed bytes whole: the prelude, its
	// separator, the body. Printed as the in-process invoke prints them.
	streamed, err := lambdadev.DecodeStreamed(answer)
	if err != nil {
		return answer, err
	}
	return json.Marshal(streamed)
}

// emulate builds the named function (unless opts names a bootstrap) and
// runs the event prepare makes through it under the runtime interface
// emulator with env. The event is prepared last, once the emulator
// listens: its signature is fresh for two minutes, and a build on a loaded
// machine can take longer than that.
func emulate(ctx context.Context, root, name string, env []string, prepare func() ([]byte, error), opts invokeOptions) ([]byte, error) {
	var err error
	bin := opts.bootstrap
	if bin == "" {
		// Built for this machine's architecture: the deployed arm64 binary
		// cannot run on an amd64 host. Said first: the first build on a
		// loaded machine is silent for a minute or more.
		fmt.Fprintf(opts.logs, "building functions/%s for this machine (linux/%s)…\n", name, runtime.GOARCH)
		if bin, err = lambdadev.BuildBootstrap(ctx, root, name, filepath.Join(root, ".cache", "invoke"), ""); err != nil {
			return nil, err
		}
	}
	emu := opts.rie
	if emu == "" {
		binDir := filepath.Join(root, ".cache", "bin")
		if _, statErr := os.Stat(filepath.Join(binDir, "aws-lambda-rie")); statErr != nil {
			fmt.Fprintln(opts.logs, "installing the Lambda runtime interface emulator into .cache/bin (first use only)…")
		}
		if emu, err = lambdadev.InstallRIE(ctx, binDir); err != nil {
			return nil, err
		}
	}
	logs := &untilAnswered{w: opts.output}
	e, err := lambdadev.StartEmulator(ctx, emu, bin, append(env, "AWS_LAMBDA_FUNCTION_NAME=byorelay-"+name), logs)
	if err != nil {
		return nil, err
	}
	defer e.Stop()
	event, err := prepare()
	if err != nil {
		return nil, err
	}
	answer, err := e.Invoke(ctx, event)
	// Stopping the emulator under a function waiting for its next event
	// makes the runtime print "failed to get the next invoke … connection
	// refused": shutdown noise after every invoke, failed or not.
	logs.answered()
	return answer, err
}

// untilAnswered passes the emulator's and the function's output on until
// the invoke has answered, and drops what they say while being stopped.
type untilAnswered struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (u *untilAnswered) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return len(p), nil
	}
	return u.w.Write(p)
}

func (u *untilAnswered) answered() {
	u.mu.Lock()
	u.done = true
	u.mu.Unlock()
}

// functionEnv is the function's environment. With TABLE_NAME set it is this
// process's, aimed at that table, except that a loopback DynamoDB gets the
// local stack's credentials: DynamoDB Local keeps a separate set of tables
// per access key and region, so with the developer's own AWS credentials
// the function would look in an empty namespace and fail with 500.
// Otherwise it is a DynamoDB Local started here with the demo seeded.
func functionEnv(ctx context.Context, world *demo.World, progress io.Writer) (env []string, stop func(), err error) {
	if os.Getenv("TABLE_NAME") != "" {
		endpoint := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
		if endpoint == "" {
			endpoint = os.Getenv("AWS_ENDPOINT_URL")
		}
		if !loopbackURL(endpoint) {
			return nil, func() {}, nil
		}
		return append(os.Environ(), localCredentials(endpoint)...), func() {}, nil
	}
	fmt.Fprintln(progress, "starting DynamoDB Local (in memory)…")
	endpoint, stop, err := localtest.StartDynamoWithProgress(progress)
	if err != nil {
		return nil, nil, fmt.Errorf("DynamoDB Local: %w", err)
	}
	db := dynamodb.NewFromConfig(localtest.AWSConfig(endpoint))
	if err := world.Seed(ctx, db, invokeTable); err != nil {
		stop()
		return nil, nil, err
	}
	return append([]string{"TABLE_NAME=" + invokeTable}, localCredentials(endpoint)...), stop, nil
}

// localCredentials are the variables that point a function at a local
// DynamoDB with the credentials and region localtest.AWSConfig uses, the
// ones `byorelay-local serve` created its table under. Later entries win over
// the inherited environment.
func localCredentials(endpoint string) []string {
	return []string{
		"AWS_ENDPOINT_URL_DYNAMODB=" + endpoint,
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=local",
		"AWS_SECRET_ACCESS_KEY=local",
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
	}
}

func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Host != "" && isLoopbackHost(u.Hostname())
}

// getenv reads env as the function will (later entries win), or this
// process's environment when env is nil.
func getenv(env []string) func(string) string {
	if env == nil {
		return os.Getenv
	}
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return func(k string) string { return vars[k] }
}

// relayLease is what a sample event's {{leaseId}} becomes: the lease the
// demo daemon holds on demo-job-1 in the local table the function will use
// (so after `make invoke FN=claim`, fetch and result name that grant), or
// demo.NoLease, a lease nobody holds, for a table that is not local.
func relayLease(ctx context.Context, env []string) (string, error) {
	get := getenv(env)
	endpoint := get("AWS_ENDPOINT_URL_DYNAMODB")
	if !loopbackURL(endpoint) {
		return demo.NoLease, nil
	}
	routing, err := dynamo.New(dynamo.Config{DB: dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), Table: get("TABLE_NAME")})
	if err != nil {
		return "", err
	}
	return demo.RelayLease(ctx, routing)
}

func invokeInProcess(ctx context.Context, fn lambdafn.Function, env []string, event []byte, logs io.Writer) ([]byte, error) {
	get := getenv(env)
	e, err := lambdafn.LoadEnv(get)
	if err != nil {
		return nil, err
	}
	opts := lambdafn.Options{MetricsOut: logs, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if ep := get("AWS_ENDPOINT_URL_DYNAMODB"); env != nil && ep != "" {
		cfg := localtest.AWSConfig(ep)
		opts.AWS = &cfg
	}
	st, err := lambdafn.Open(e, opts)
	if err != nil {
		return nil, err
	}
	return lambdadev.InvokeInProcess(ctx, st, fn, event)
}

// eventMentions reports whether the event's body names s, decoding a
// base64 body (payload.json's) first.
func eventMentions(raw []byte, s string) bool {
	var ev struct {
		Body            string `json:"body"`
		IsBase64Encoded bool   `json:"isBase64Encoded"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return false
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		decoded, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return false
		}
		body = decoded
	}
	return bytes.Contains(body, []byte(s))
}
