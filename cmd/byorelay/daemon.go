package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/cmd/internal/backendflag"
	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/protocol"
)

// runDaemon is `byorelay daemon`: a minimal runnable device. The first run
// makes keys and pairs (the user code is printed for a person to approve);
// the keys and pairing are kept in a state file only its owner can read,
// and later runs go straight to work. Ctrl-C releases held jobs and exits.
func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("byorelay daemon", flag.ContinueOnError)
	fs.SetOutput(stderr)
	relayURL := fs.String("relay", "", "the relay to pair with (default: the stack 'make run' started, found through the stack.env\nit writes in the demo dir, else http://127.0.0.1:8787); once paired, the state file's relay is used")
	statePath := fs.String("state", defaultStatePath(), "the device's key and pairing file (private keys: keep it out of any repository)")
	label := fs.String("label", hostLabel(), "how this device is named to the person approving it")
	concurrency := fs.Int("concurrency", 2, "jobs run at once")
	offer := fs.String("offer", "private", "private (the owner's own work only) or team (also work a control plane grants)")
	service := fs.String("service", "default", "service name advertised for each kind")
	heartbeat := fs.Duration("heartbeat", 10*time.Second, "longest gap between heartbeats; keep it well under the relay's lease")
	stream := fs.Bool("stream", true, "take jobs a site publishes as live streams and stream their answers as they are produced\n(--stream=false: take only jobs published whole)")
	var backend backendflag.Flags
	backend.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay daemon [flags]\n\nA BYOLLM device: pairs once, then claims, runs and reports jobs until stopped.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *relayURL == "" {
		*relayURL = "http://127.0.0.1:8787"
		if stack, found := localstack.Find(); found {
			*relayURL = stack.URL
		}
	}
	if err := serveDevice(ctx, deviceOptions{
		relayURL: *relayURL, statePath: *statePath, label: *label, concurrency: *concurrency,
		offer: *offer, service: *service, heartbeat: *heartbeat, stream: *stream, backend: backend,
	}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "byorelay daemon: %v\n", err)
		if errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused") {
			fmt.Fprintln(stderr, "nothing answers there: start the relay first ('make run' in another terminal), or name it with --relay URL")
		}
		return 1
	}
	return 0
}

type deviceOptions struct {
	relayURL, statePath, label, offer, service string
	concurrency                                int
	heartbeat                                  time.Duration
	stream                                     bool
	backend                                    backendflag.Flags
}

func serveDevice(ctx context.Context, o deviceOptions, stdout, stderr io.Writer) error {
	be, err := o.backend.Build()
	if err != nil {
		return err
	}
	state, err := daemon.LoadState(o.statePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		keys, err := protocol.GenerateKeys()
		if err != nil {
			return err
		}
		state = daemon.State{RelayURL: strings.TrimRight(o.relayURL, "/"), Keys: keys.Stored(time.Now().UnixMilli())}
		if err := daemon.SaveState(o.statePath, state); err != nil {
			return fmt.Errorf("saving new keys: %w", err)
		}
		fmt.Fprintf(stdout, "made new device keys in %s\n", o.statePath)
	case err != nil:
		return err
	case state.Pairing == nil && state.RelayURL != strings.TrimRight(o.relayURL, "/"):
		// Not paired yet (an earlier run found no relay, or stopped before
		// approval): the relay named now wins; the keys are kept.
		state.RelayURL = strings.TrimRight(o.relayURL, "/")
		if err := daemon.SaveState(o.statePath, state); err != nil {
			return err
		}
	}
	keys, err := state.Keys.Keys()
	if err != nil {
		return fmt.Errorf("%s: %w", o.statePath, err)
	}
	cfg := daemon.Config{
		RelayURL: state.RelayURL, Keys: keys, Backend: be, Concurrency: o.concurrency,
		OfferScope: o.offer, Service: o.service, HeartbeatInterval: o.heartbeat,
		// On by default: a site that publishes a job as a live stream
		// (examples/chat -stream) has it offered only to a device that
		// opts in, and both backends here can stream.
		Streams: daemon.Streaming{Enabled: o.stream},
		Logger:  slog.New(slog.NewTextHandler(stderr, nil)),
	}
	if state.Pairing != nil {
		cfg.Pairing = *state.Pairing
	}
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device %s, relay %s\n", keys.KeyID(), state.RelayURL)

	if state.Pairing == nil {
		p, err := d.Pair(ctx, o.label, func(c daemon.PairCode) {
			fmt.Fprintf(stdout, "\nto pair this device, approve the code %s at %s\n", c.UserCode, c.VerificationURL)
			fmt.Fprintf(stdout, "(against make run's relay: byorelay admin approve %s --owner YOU; against a site, on its page)\n\n", c.UserCode)
		})
		if err != nil {
			return fmt.Errorf("pairing: %w", err)
		}
		state.Pairing = &p
		if err := daemon.SaveState(o.statePath, state); err != nil {
			return fmt.Errorf("saving the pairing: %w", err)
		}
		fmt.Fprintf(stdout, "paired: runner %s, owner %s, serving %d site(s)\n", p.RunnerID, p.Owner, len(p.Sites))
	}

	fmt.Fprintln(stdout, "working; Ctrl-C to stop")
	runErr := d.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(shutdown); err != nil {
		fmt.Fprintf(stderr, "releasing held jobs: %v\n", err)
	}
	// The pins may have moved (a site added, rotated or withdrawn).
	p := d.Pairing()
	state.Pairing = &p
	if errors.Is(runErr, daemon.ErrRevoked) {
		// Revocation ends the pairing: the next run pairs again.
		state.Pairing = nil
	}
	if err := daemon.SaveState(o.statePath, state); err != nil {
		return fmt.Errorf("saving the pairing: %w", err)
	}
	if errors.Is(runErr, context.Canceled) {
		return nil
	}
	return runErr
}

func defaultStatePath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "byorelay-daemon.json"
	}
	return filepath.Join(dir, "byorelay", "daemon.json")
}

func hostLabel() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "byorelay daemon"
	}
	if len(h) > protocol.MaxLabelLength {
		h = h[:protocol.MaxLabelLength]
	}
	return h
}
