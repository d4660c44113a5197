package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/cmd/internal/backendflag"
	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
)

// demoOptions are demo's flags.
type demoOptions struct {
	relay     string
	demoDir   string
	jobs      int
	timeout   time.Duration
	backend   backendflag.Flags
	pairAsWho string
	device    bool
	token     string
}

// runDemo is `byorelay-local demo`: against a running local stack, a Go site and
// a freshly paired Go daemon finish real jobs, and every step is told as it
// happens, for somebody seeing BYOLLM for the first time.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o demoOptions
	fs := flag.NewFlagSet("byorelay-local demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.relay, "relay", "", "the relay (default: the local stack 'make run' started, found through\nthe stack.env it writes in the demo dir)")
	fs.StringVar(&o.demoDir, "demo-dir", "", "where 'byorelay-local serve' keeps the demo site's keys\n(default $"+localstack.EnvDir+", else .cache/demo in the repository)")
	fs.IntVar(&o.jobs, "jobs", 3, "how many jobs the site publishes")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "give up if the jobs have not all come back by then")
	fs.StringVar(&o.pairAsWho, "owner", demo.Owner, "the person the demo device is approved for (they consented to the demo site)")
	fs.BoolVar(&o.device, "device", true, "pair and run a Go device too; --device=false only publishes and collects,\nfor a device of the owner that is already running (a real byollm daemon)")
	o.backend.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay-local demo [flags]\n\nA Go site and a Go daemon complete real jobs through the local stack, step\nby step. Start the stack first: make run (or byorelay-local serve).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.jobs < 1 {
		fmt.Fprintln(stderr, "byorelay-local demo: --jobs must be at least 1")
		return 2
	}
	if err := findStack(&o); err != nil {
		fmt.Fprintf(stderr, "byorelay-local demo: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := demoSteps(ctx, o, stdout); err != nil {
		if stackDown(err) {
			// The dial error says less than what to do about it.
			fmt.Fprint(stderr, "\nbyorelay-local demo: "+noStack(o.relay, "demo"))
			return 1
		}
		fmt.Fprintf(stderr, "\nbyorelay-local demo: %v\n", err)
		return 1
	}
	return 0
}

// stackDown reports whether err says nothing answers at the relay. The
// clients' errors do not all wrap the dial error, so its words are checked
// too.
func stackDown(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}

// noStack says what to do when nothing answers at relay, for the make
// target that was run.
func noStack(relay, target string) string {
	return fmt.Sprintf("nothing answers at %s: start the stack first with 'make run' in another terminal,\n"+
		"or name where it runs: make %s DEMO_FLAGS='--relay http://127.0.0.1:PORT'\n", relay, target)
}

// findStack fills in the relay and the admin token from the env file a
// running stack wrote in the demo dir, so `make demo` finds a stack started
// on any port. An explicit --relay wins; the token still comes from the
// file when it names the same stack, else from $BYORELAY_ADMIN_TOKEN.
func findStack(o *demoOptions) error {
	if o.demoDir == "" {
		dir, err := localstack.Dir()
		if err != nil {
			return err
		}
		o.demoDir = dir
	}
	stack, found, err := localstack.Read(o.demoDir)
	if err != nil {
		return err
	}
	given := strings.TrimRight(o.relay, "/")
	switch {
	case given == "" && found:
		o.relay = stack.URL
	case given == "":
		o.relay = "http://127.0.0.1:8787"
	default:
		o.relay = given
	}
	o.token = os.Getenv(controlplane.EnvAdminToken)
	if found && stack.URL == o.relay {
		o.token = stack.AdminToken
	}
	return nil
}

// narrator prints from several goroutines without interleaving lines.
type narrator struct {
	mu  sync.Mutex
	out io.Writer
}

func (n *narrator) say(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.out, format+"\n", args...)
}

var demoPrompts = []string{
	"Say hello to the relay.",
	"Name three things a blind relay cannot read.",
	"Why does the device check the site's key before running anything?",
	"Summarise BYOLLM in one sentence.",
}

func demoSteps(ctx context.Context, o demoOptions, out io.Writer) error {
	n := &narrator{out: out}
	relayURL := strings.TrimRight(o.relay, "/")
	n.say("byorelay-local demo: a site and a device finish %d job(s) through the relay at %s.", o.jobs, relayURL)
	n.say("The relay routes work and holds only public keys and ciphertext: it can read none of it.\n")

	// 1. The site.
	dir := o.demoDir
	// Read, never made here: keys made now would be a site the running
	// stack has never heard of.
	if _, err := os.Stat(filepath.Join(dir, "site-keys.json")); err != nil {
		return fmt.Errorf("no demo site keys in %s (start the stack with 'make run' first): %w", dir, err)
	}
	world, err := demo.Load(dir)
	if err != nil {
		return fmt.Errorf("reading the demo site's keys from %s: %w", dir, err)
	}
	shop, err := site.New(site.Config{RelayURL: relayURL, SiteID: demo.SiteID, Keys: world.Site})
	if err != nil {
		return err
	}
	n.say("1. The site %q (key %s) is loaded from %s.", demo.SiteID, world.Site.KeyID(), dir)
	n.say("   The relay knows only its public key; the private key stays with the site.\n")
	if !o.device {
		n.say("2. No device of the demo's own (--device=false): a device of %s paired already, such as a", o.pairAsWho)
		n.say("   running byollm, must claim the jobs.\n")
		return publishAndCollect(ctx, n, o, shop, nil)
	}

	// 2. The device, paired the way a person pairs one.
	backend, err := o.backend.Build()
	if err != nil {
		return err
	}
	deviceKeys, err := protocol.GenerateKeys()
	if err != nil {
		return err
	}
	dev, err := daemon.New(daemon.Config{
		RelayURL: relayURL, Keys: deviceKeys, Backend: backend, Service: demo.Service, HeartbeatInterval: time.Second,
		OnEvent: func(e daemon.Event) { narrateDevice(n, e) },
	})
	if err != nil {
		return err
	}
	admin := controlplane.NewClient(relayURL, nil).WithToken(o.token)
	n.say("2. A new device makes its own keys (fingerprint %s) and asks the relay to pair.", deviceKeys.KeyID())
	pairCtx, stopPairing := context.WithCancel(ctx)
	defer stopPairing()
	var approveErr error
	pairing, err := dev.Pair(pairCtx, "byorelay-local demo", func(code daemon.PairCode) {
		n.say("   The relay answers with a user code: %s", code.UserCode)
		n.say("   A person would approve it at %s;", code.VerificationURL)
		n.say("   the demo approves it for %q through the control plane's admin API.", o.pairAsWho)
		if _, approveErr = admin.Approve(ctx, controlplane.ApproveRequest{UserCode: code.UserCode, Owner: o.pairAsWho}); approveErr != nil {
			// Polling on would only wait out the code.
			stopPairing()
		}
	})
	if approveErr != nil {
		return fmt.Errorf("approving the device through %s/admin: %w", relayURL, approveErr)
	}
	if err != nil {
		return fmt.Errorf("pairing: %w", err)
	}
	n.say("   Approved: the device is runner %q, owned by %s.", pairing.RunnerID, pairing.Owner)
	if _, ok := pairing.Sites[world.Site.KeyID()]; !ok {
		return fmt.Errorf("the device was not offered the demo site: does %s consent to %s?", o.pairAsWho, demo.SiteID)
	}
	n.say("   It pinned the site's key %s: from now on it opens work only if that key signed it.\n", world.Site.KeyID())

	runCtx, stopDevice := context.WithCancel(ctx)
	var ran chan error // set once the device runs
	defer func() {
		stopDevice()
		if ran != nil {
			<-ran
		}
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = dev.Shutdown(shutdown)
		// The stack keeps its tables across runs: a device left paired by
		// every demo would pile up in the console beside the devices
		// people paired.
		if _, err := admin.RevokeDevice(shutdown, pairing.RunnerID); err != nil {
			n.say("   (the demo's device %s is still paired: %v)", pairing.RunnerID, err)
			return
		}
		n.say("   The demo's device %s is revoked, so the console lists only devices people pair.", pairing.RunnerID)
	}()
	return publishAndCollect(ctx, n, o, shop, func() <-chan error {
		ran = make(chan error, 1)
		go func() { ran <- dev.Run(runCtx) }()
		return ran
	})
}

// publishAndCollect publishes the jobs, starts the device (when the demo
// runs one) and pumps the site until every result is back.
func publishAndCollect(ctx context.Context, n *narrator, o demoOptions, shop *site.Client, startDevice func() <-chan error) error {
	// 3. The jobs.
	n.say("3. The site publishes %d job(s). The relay sees each stub only (id, kind, owner, size,", o.jobs)
	n.say("   deadline). The prompt waits at the site, sealed at rest to the site's own key, until")
	n.say("   a device claims the job; then the site seals it to that device's key, and the relay")
	n.say("   carries it sealed: it never reads it.")
	runID := time.Now().Format("150405")
	want := map[string]string{}
	for i := range o.jobs {
		id := fmt.Sprintf("demo-%s-%d", runID, i+1)
		prompt := demoPrompts[i%len(demoPrompts)]
		stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: o.pairAsWho, Audience: "private",
			DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}
		if _, err := shop.Publish(ctx, stub, protocol.GeneratePayload(prompt)); err != nil {
			return fmt.Errorf("publishing %s: %w", id, err)
		}
		want[id] = prompt
		n.say("   - %s (llm.generate): %q", id, prompt)
	}
	n.say("\n4. The exchange, as it happens:")

	var ran <-chan error // nil without a device of ours: never ready
	if startDevice != nil {
		ran = startDevice()
	} else {
		n.say("   (no device of the demo's own: waiting for a device of %s, such as a running byollm, to claim them)", o.pairAsWho)
	}

	var results []site.Result
	for len(results) < len(want) {
		rep, err := shop.Pump(ctx)
		if err != nil {
			return fmt.Errorf("site: %w", err)
		}
		for _, id := range rep.Sealed {
			n.say("   site:   sealed %s to the device that claimed it, after checking the device's key", id)
		}
		for _, r := range rep.Refused {
			n.say("   site:   refused %s: %s", r.JobID, r.Reason)
		}
		for _, r := range rep.Results {
			if _, ours := want[r.JobID]; !ours {
				continue
			}
			n.say("   site:   opened the result of %s: signed by device %s, the one it sealed the work to", r.JobID, r.DeviceKeyID)
			results = append(results, r)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %d of %d job(s) came back (%w)", len(results), len(want), ctx.Err())
		case err := <-ran:
			return fmt.Errorf("the device stopped: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}

	n.say("\n5. Results:")
	for _, r := range results {
		text := r.Outcome.TextOrEmpty()
		if r.Outcome.Outcome != protocol.DispositionOK {
			text = r.Outcome.Outcome + ": " + r.Outcome.Message
		}
		n.say("   %s  %q", r.JobID, want[r.JobID])
		n.say("      -> %q", text)
		n.say("      ran on %s (%s) in %d ms, by %s for %s", r.Ran.Model, r.Ran.BackendClass, r.Ran.DurationMs, r.RunnerID, r.RunnerOwner)
	}
	n.say("\nDone: %d job(s), each sealed end to end. The relay carried stubs and ciphertext only.", len(results))
	return nil
}

// narrateDevice tells a device event in plain words.
func narrateDevice(n *narrator, e daemon.Event) {
	switch e.Type {
	case daemon.EventClaimed:
		n.say("   device: claimed %s: it holds a lease on it now, but has no prompt yet", e.JobID)
	case daemon.EventWaiting:
		n.say("   device: asked for %s's payload; the site has not sealed it yet, so it waits", e.JobID)
	case daemon.EventOpened:
		n.say("   device: opened %s (%s)", e.JobID, e.Detail)
	case daemon.EventRunning:
		n.say("   device: running %s on its own model", e.JobID)
	case daemon.EventReported:
		n.say("   device: sealed the answer to %s for the site only, and reported it (%s)", e.JobID, e.Detail)
	case daemon.EventRefused:
		n.say("   device: refused %s: %s", e.JobID, e.Detail)
	case daemon.EventCancelled:
		n.say("   device: the site cancelled %s", e.JobID)
	case daemon.EventLost:
		n.say("   device: lost the lease on %s; stopping without reporting", e.JobID)
	case daemon.EventError:
		n.say("   device: problem with %s: %s", e.JobID, e.Detail)
	case daemon.EventRevoked:
		n.say("   device: this device was revoked")
	}
}
