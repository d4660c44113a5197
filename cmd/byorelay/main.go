// Command byorelay is the relay's command line: `serve` runs the local
// stack, `invoke` runs one function with a sample event, `admin` writes the
// control plane's projection, `bench` measures it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/byorelay/byorelay/bench"
)

const usage = `usage: byorelay <command> [flags]

commands:
  serve    the local stack: DynamoDB Local and every function on one port,
           with a demo projection (what 'make run' runs)
  invoke   run one function with an event file, as 'sam local invoke' would
  admin    manage sites, devices, consents and pairings in the projection
  daemon   a minimal BYOLLM daemon: pair by device code, then serve jobs
           with an echo or OpenAI-compatible backend
  demo     against a running local stack, a Go site and a Go daemon
           complete real jobs and say what happens at each step
  demo-stream  against a running local stack, a page where an answer
           streams token by token through the relay (docs/streaming.md)
  fake-llm a stand-in OpenAI-compatible model server, so a real byollm
           daemon can run a demo job without a model installed
  bench    drive the job lifecycle and report throughput, latency and cost
  site     a direct-lane BYOLLM site locally: the site functions on one
           port over DynamoDB Local

'byorelay <command> -h' describes a command's flags.
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
	case "invoke":
		return runInvoke(ctx, args[1:], stdout, stderr)
	case "admin":
		return runAdmin(ctx, args[1:], stdout, stderr)
	case "daemon":
		return runDaemon(ctx, args[1:], stdout, stderr)
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
	case "site":
		return runSite(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "byorelay: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
