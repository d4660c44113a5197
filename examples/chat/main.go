// Command chat is a runnable example of a site's web backend on BYOLLM: a
// page where the signed-in person types a prompt, the site enqueues it as
// an llm.generate job, the person's own daemon runs it, and the page
// shows the job's state as it moves (server-sent events, with a polling
// fallback) and then the answer.
//
// One flag picks the lane; nothing else changes:
//
//	go run ./examples/chat -lane direct
//	    the site serves daemons itself at /byollm/* on the same origin;
//	    `go run ./cmd/byorelay daemon --relay http://127.0.0.1:8080` (or the
//	    real daemon, localtest/js/node_modules/.bin/byollm connect URL) and
//	    approve the code on the page
//	go run ./examples/chat -lane cloud -relay http://127.0.0.1:8787 -site demo-site -keys .cache/demo/site-keys.json
//	    the site publishes through byorelay; daemons pair with the relay
//
// Either way the page talks to one site app, siteserver.Server, with the
// same calls.
//
// The site's keys are read from -keys, and made there (mode 0600) on the
// first run: a site's identity must outlive the process, or every paired
// daemon's pin breaks. Never commit them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func main() {
	// Ctrl-C and SIGTERM stop the server and the lane's loop; run then
	// returns 0, so an interrupt is a clean stop and not a failure.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	lane   string
	addr   string
	keys   string
	owner  string
	relay  string
	siteID string
	// stream publishes cloud-lane jobs as live streams (appLane.Ask).
	stream bool
	// table and ddbEndpoint pick a durable store (store.go).
	table       string
	ddbEndpoint string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.lane, "lane", "direct", `"direct" (daemons pair with this site) or "cloud" (through a relay)`)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "where to serve the page (and, direct, the daemon endpoints)")
	fs.StringVar(&o.keys, "keys", filepath.Join(".cache", "example", "site-keys.json"), "the site's keys (StoredKeys JSON); made on the first run")
	fs.StringVar(&o.owner, "owner", "demo-user", "the signed-in person (a real site takes it from its session)")
	fs.StringVar(&o.relay, "relay", "", "cloud lane: the relay's origin")
	fs.StringVar(&o.siteID, "site", "", "cloud lane: this site's id at the relay")
	fs.BoolVar(&o.stream, "stream", false, "cloud lane: publish each job as a live stream, which only a device that opts in to streams takes\n(byorelay daemon does by default; a byollm 0.1.1 daemon never does, so leave it off if your people run one)")
	fs.StringVar(&o.table, "table", "", "keep jobs in this DynamoDB table (made if absent) instead of process memory")
	fs.StringVar(&o.ddbEndpoint, "ddb-endpoint", "", "with -table: a DynamoDB endpoint such as DynamoDB Local's")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.lane != "direct" && o.lane != "cloud" {
		fmt.Fprintf(stderr, "chat: -lane is direct or cloud, not %q\n", o.lane)
		return 2
	}
	if o.lane == "cloud" && (o.relay == "" || o.siteID == "") {
		fmt.Fprintln(stderr, "chat: -lane cloud needs -relay and -site")
		return 2
	}
	if o.stream && o.lane != "cloud" {
		fmt.Fprintln(stderr, "chat: -stream is the cloud lane's (the direct lane answers whole)")
		return 2
	}
	if err := serve(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "chat: %v\n", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, stdout io.Writer) error {
	keys, err := loadOrCreateKeys(o.keys)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	origin := "http://" + ln.Addr().String()
	store, err := openStore(ctx, o)
	if err != nil {
		_ = ln.Close()
		return err
	}
	handler, background, err := build(o, keys, origin, store)
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- background(ctx) }()
	fmt.Fprintf(stdout, "site %s (%s lane) for %s: open %s\n", keys.KeyID(), o.lane, o.owner, origin)
	if o.lane == "direct" {
		fmt.Fprintf(stdout, "pair a daemon, then enter its code on the page:\n"+
			"  go run ./cmd/byorelay daemon --relay %[1]s --state .cache/example/daemon.json\n"+
			"  or the real one (make deps installs it): localtest/js/node_modules/.bin/byollm connect %[1]s\n", origin)
	}
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	shutdown, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// build wires the site app on the chosen lane behind the web backend.
// background is what the lane runs until its context ends: the cloud
// lane's pump, the direct lane's sweeper.
func build(o options, keys *protocol.Keys, origin string, store sitestore.Store) (handler http.Handler, background func(context.Context) error, err error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := siteserver.Config{Store: store, Keys: keys, Logger: log}
	if o.lane == "cloud" {
		cfg.Cloud = &siteserver.CloudLane{RelayURL: strings.TrimRight(o.relay, "/"), SiteID: o.siteID}
	} else {
		cfg.VerificationURL = origin + "/"
	}
	app, err := siteserver.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	lane := appLane{app: app, stream: o.stream}
	if o.lane == "cloud" {
		// The app publishes, seals for claims and collects results on its
		// own loops; each job's end is in the store, which Subscribe hears.
		pump := func(ctx context.Context) error {
			return app.Run(ctx, 250*time.Millisecond, func(site.Report) {})
		}
		live, err := lane.live(o.owner)
		if err != nil {
			return nil, nil, err
		}
		return (&Web{Lane: lane, Owner: o.owner, Live: live}).Handler(), pump, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/byollm/", app) // the daemon endpoints, on the page's origin
	mux.Handle("/", (&Web{Lane: lane, Owner: o.owner, Pair: lane.pair}).Handler())
	// The scheduled sweeper's stand-in: claims, heartbeats and reads
	// sweep in-line; this ends what nobody touches (a lapsed lease, a job
	// past its deadline) on time.
	sweep := func(ctx context.Context) error {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				if _, err := app.Sweep(ctx); err != nil {
					log.Warn("sweep failed", "error", err)
				}
			}
		}
	}
	return mux, sweep, nil
}

// loadOrCreateKeys reads the site's keys, or makes them and saves them
// owner-only.
func loadOrCreateKeys(path string) (*protocol.Keys, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		var stored protocol.StoredKeys
		if err := json.Unmarshal(raw, &stored); err != nil {
			return nil, fmt.Errorf("site keys %s: %w", path, err)
		}
		return stored.Keys()
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keys, err := protocol.GenerateKeys()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(keys.Stored(time.Now().UnixMilli()), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return nil, err
	}
	return keys, nil
}
