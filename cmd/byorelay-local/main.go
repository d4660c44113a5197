// Command byorelay-local is the local stack's command line: `serve` runs
// the relay's functions on this machine, `site` the site's, `invoke` one
// function with a sample event, `demo` and `demo-stream` drive them,
// `fake-llm` stands in for a model, `bench` measures it. It links the test
// scaffolding (localtest: DynamoDB Local, the demo world's keys, the
// local API server), which is why it is not cmd/byorelay: what an operator
// runs against a deployment (admin, daemon) is built without it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/byorelay/byorelay/internal/bench"
	"github.com/byorelay/byorelay/internal/platform/version"
)

const usage = `usage: byorelay-local <command> [flags]

commands:
  serve    the local stack: DynamoDB Local and every function on one port,
           with a demo projection (what 'make run' runs)
  site     a direct-lane BYOLLM site locally: the site functions on one
           port over DynamoDB Local (what 'make site' runs)
  invoke   run one function with an event file, as 'sam local invoke' would
  demo     against a running local stack, a Go site and a Go daemon
           complete real jobs and say what happens at each step
  demo-stream  against a running local stack, a page where an answer
           streams token by token through the relay (docs/streaming.md)
  fake-llm a stand-in OpenAI-compatible model server, so a real byollm
           daemon can run a demo job without a model installed
  bench    drive the job lifecycle and report throughput, latency and cost
  version  print the release this build is

The admin CLI and the daemon are byorelay (cmd/byorelay): they find the
stack serve started without being told.

'byorelay-local <command> -h' describes a command's flags.
`

func main() {
	// Ctrl-C and SIGTERM cancel ctx, so serve can stop the services it
	// started (DynamoDB Local is a child Java process that would outlive us).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit code: 0 done,
// 1 failed, 2 misused.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "site":
		return runSite(ctx, args[1:], stdout, stderr)
	case "invoke":
		return runInvoke(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "demo-stream":
		return runDemoStream(ctx, args[1:], stdout, stderr)
	case "fake-llm":
		return runFakeLLM(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "bench-target":
		// Not in the usage: the process `bench` starts for a memory target.
		return bench.TargetMain(args[1:], os.Stdin, stdout)
	case "admin", "daemon":
		fmt.Fprintf(stderr, "byorelay-local: %s is byorelay's: go run ./cmd/byorelay %s\n", args[0], args[0])
		return 2
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "byorelay-local %s\n", version.Version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "byorelay-local: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
