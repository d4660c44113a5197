// Command byorelay is what an operator and a device owner run against a
// deployment: `admin` manages the control plane's projection through the
// admin API, `daemon` is a minimal BYOLLM device. It links no test code:
// the local stack, the demo, the bench and `invoke` are cmd/byorelay-local,
// which links localtest (deps_test.go holds the line).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/byorelay/byorelay/internal/platform/version"
)

const usage = `usage: byorelay <command> [flags]

commands:
  admin    manage sites, devices, consents and pairings in the projection
  daemon   a minimal BYOLLM daemon: pair by device code, then serve jobs
           with an echo or OpenAI-compatible backend
  version  print the release this build is

With no endpoint given, both find the local stack 'make run' started.
The local stack, the demo, the bench and invoke are byorelay-local.

'byorelay <command> -h' describes a command's flags.
`

func main() {
	// Ctrl-C and SIGTERM cancel ctx, so the daemon releases the jobs it
	// holds before it exits.
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
	case "admin":
		return runAdmin(ctx, args[1:], stdout, stderr)
	case "daemon":
		return runDaemon(ctx, args[1:], stdout, stderr)
	case "serve", "site", "invoke", "demo", "demo-stream", "fake-llm", "bench":
		fmt.Fprintf(stderr, "byorelay: %s is byorelay-local's: go run ./cmd/byorelay-local %s\n", args[0], args[0])
		return 2
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "byorelay %s\n", version.Version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "byorelay: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
