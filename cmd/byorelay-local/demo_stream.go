package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/streamdemo"
	"github.com/byorelay/byorelay/protocol"
)

// runDemoStream is `byorelay-local demo-stream`: against a running local stack, a
// Go device that streams (the echo backend, dripping a word at a time) is
// paired, and a page is served where a prompt's answer appears token by
// token through the relay (docs/streaming.md). It runs until interrupted.
func runDemoStream(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o demoOptions
	var addr string
	var drip time.Duration
	fs := flag.NewFlagSet("byorelay-local demo-stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.relay, "relay", "", "the relay (default: the local stack 'make run' started)")
	fs.StringVar(&o.demoDir, "demo-dir", "", "where 'byorelay-local serve' keeps the demo site's keys")
	fs.StringVar(&o.pairAsWho, "owner", demo.Owner, "the person the demo device is approved for")
	fs.StringVar(&addr, "listen", "127.0.0.1:8790", "where the page is served")
	fs.DurationVar(&drip, "drip", 200*time.Millisecond, "the echo backend's pause between words")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := findStack(&o); err != nil {
		fmt.Fprintf(stderr, "byorelay-local demo-stream: %v\n", err)
		return 1
	}
	if err := demoStream(ctx, o, addr, drip, stdout); err != nil && ctx.Err() == nil {
		if stackDown(err) {
			fmt.Fprintf(stderr, "byorelay-local demo-stream: %s", noStack(o.relay, "demo-stream"))
			return 1
		}
		fmt.Fprintf(stderr, "byorelay-local demo-stream: %v\n", err)
		return 1
	}
	return 0
}

func demoStream(ctx context.Context, o demoOptions, addr string, drip time.Duration, out io.Writer) error {
	relayURL := strings.TrimRight(o.relay, "/")
	world, err := demo.Load(o.demoDir)
	if err != nil {
		return fmt.Errorf("demo site keys: %w", err)
	}
	shop, err := site.New(site.Config{RelayURL: relayURL, SiteID: demo.SiteID, Keys: world.Site})
	if err != nil {
		return err
	}
	keys, err := protocol.GenerateKeys()
	if err != nil {
		return err
	}
	dev, err := daemon.New(daemon.Config{
		RelayURL: relayURL, Keys: keys, Backend: daemon.EchoBackend{Drip: drip}, HeartbeatInterval: time.Second,
		Streams: daemon.Streaming{Enabled: true, FlushEvery: 60 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	admin := controlplane.NewClient(relayURL, nil).WithToken(o.token)
	var approveErr error
	if _, err := dev.Pair(ctx, "byorelay-local demo-stream", func(code daemon.PairCode) {
		_, approveErr = admin.Approve(ctx, controlplane.ApproveRequest{UserCode: code.UserCode, Owner: o.pairAsWho})
	}); err != nil || approveErr != nil {
		return fmt.Errorf("pairing the streaming device: %w", errors.Join(err, approveErr))
	}
	// The device and the site stop with ctx; waiting for them before
	// returning is what makes an interrupt a clean stop (no claim or
	// heartbeat still in flight when the process exits).
	ctx, cancel := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer loops.Wait()
	defer cancel()
	loops.Go(func() { _ = dev.Run(ctx) })
	loops.Go(func() { _ = shop.Run(ctx, 200*time.Millisecond, func(site.Report) {}) })

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: streamdemo.Handler(shop, o.pairAsWho), ReadHeaderTimeout: 10 * time.Second}
	loops.Go(func() {
		<-ctx.Done()
		// An open answer stream would hold Shutdown for ever: it gets a
		// moment, then the connection is closed.
		shutdown, stop := context.WithTimeout(context.Background(), 2*time.Second)
		defer stop()
		if srv.Shutdown(shutdown) != nil {
			_ = srv.Close()
		}
	})
	fmt.Fprintf(out, "byorelay-local demo-stream: open http://%s and ask; the answer streams through %s\n", ln.Addr(), relayURL)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
