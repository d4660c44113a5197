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
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/demo"
	localsitepump "github.com/byorelay/byorelay/localtest/sitepump"
	"github.com/byorelay/byorelay/protocol"
)

// runSite is `byorelay-local site`: the direct-lane site stack locally, every
// function of site-template.yaml on one loopback port over DynamoDB Local
// (started, or given), routed as API Gateway routes them.
func runSite(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("byorelay-local site", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 8788, "loopback port for the daemon endpoints (/byollm/*) and the app API (/app/*)")
	adminPort := fs.Int("admin-port", 0, "TEST ONLY: serve the conformance admin API (reset, clock advance) on this loopback port; 0 is off")
	keysPath := fs.String("keys", "", "the site's StoredKeys JSON; created (mode 0600) if absent\n(default .cache/site/site-keys.json in the repository)")
	demoWorld := fs.Bool("demo", false, "hold the demo site's keys (.cache/demo, instead of --keys) and seed the site demo world: the demo daemon paired as runner-demo for demo-user, demo-job-1 queued; `make invoke FN=site…` can then act on this stack")
	ddb := fs.String("ddb-endpoint", "", "use this DynamoDB endpoint instead of starting DynamoDB Local")
	ddbDir := fs.String("ddb-dir", "", "where the DynamoDB Local this starts keeps its tables across runs\n(default .cache/site/"+ddbDirName+" in the repository; with --demo, .cache/demo/"+siteDemoDDBDir+")")
	fresh := fs.Bool("fresh", false, "start with an empty table: delete what the DynamoDB Local this starts kept from\nits last run (pairings, runners, jobs) in --ddb-dir; the keys stay")
	table := fs.String("table", "byorelay-site", "the site table (created if absent)")
	verify := fs.String("verification-url", "", "the page where a user types a pairing code (default: this server's /pair)")
	leaseMs := fs.Int64("lease-ms", 0, "lease length in ms (default 60000)")
	pairingTTL := fs.Int64("pairing-ttl-ms", 0, "pairing code lifetime in ms (default 600000)")
	lane := fs.String("lane", siteserver.LaneDirect, "direct: the site serves its daemons; cloud: it publishes through --relay as --site, and the pump function runs while jobs are in flight")
	relayURL := fs.String("relay", "", "the relay's origin (the cloud lane), e.g. the one `make run` prints")
	relaySite := fs.String("site", "", "this site's id at the relay (the cloud lane); register it there with the site's public keys")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay-local site [flags]\n\nA direct-lane BYOLLM site locally: the site functions of site-template.yaml\non one port over DynamoDB Local. Point a daemon at it with `byollm connect <url>`;\napprove codes and enqueue jobs through the app API (docs/site.md, \"Run a direct-lane site\").\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *ddb == "" {
		*ddb = os.Getenv(localtest.EnvDynamoEndpoint)
	}
	switch {
	case *lane == siteserver.LaneDirect && (*relayURL != "" || *relaySite != ""):
		fmt.Fprintln(stderr, "byorelay-local site: --relay and --site are the cloud lane's (--lane cloud)")
		return 2
	case *lane == siteserver.LaneCloud && (*relayURL == "" || *relaySite == ""):
		fmt.Fprintln(stderr, "byorelay-local site: --lane cloud needs --relay URL and --site ID")
		return 2
	case *lane != siteserver.LaneDirect && *lane != siteserver.LaneCloud:
		fmt.Fprintf(stderr, "byorelay-local site: --lane %q is not direct or cloud\n", *lane)
		return 2
	case *ddb != "" && (*fresh || *ddbDir != ""):
		fmt.Fprintf(stderr, "byorelay-local site: --fresh and --ddb-dir are for the DynamoDB Local this starts, and this run uses the one at %s\n", *ddb)
		return 2
	}
	fail := func(err error) int {
		if ctx.Err() != nil {
			// Ctrl-C while starting: what was started is stopped by the
			// deferred stops, and the person asked for it.
			fmt.Fprintln(stdout, "stopped")
			return 0
		}
		fmt.Fprintf(stderr, "byorelay-local site: %v\n", err)
		return 1
	}

	var world *demo.World
	var keys *protocol.Keys
	var err error
	if *demoWorld {
		if world, err = loadDemoWorld(); err != nil {
			return fail(err)
		}
		keys = world.Site
	} else {
		if *keysPath == "" {
			if *keysPath, err = defaultSiteKeys(stdout); err != nil {
				return fail(err)
			}
		}
		if keys, err = loadOrCreateSiteKeys(*keysPath, stdout); err != nil {
			return fail(err)
		}
	}
	endpoint := *ddb
	if endpoint == "" {
		if *ddbDir == "" {
			if *ddbDir, err = defaultSiteDDBDir(*demoWorld); err != nil {
				return fail(err)
			}
		}
		var stop func()
		if endpoint, stop, err = startKeptDynamo(*ddbDir, *fresh, stdout); err != nil {
			return fail(err)
		}
		defer stop()
	}
	db := dynamodb.NewFromConfig(localtest.AWSConfig(endpoint))
	if _, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(*table)}); err != nil {
		var missing *types.ResourceNotFoundException
		if !errors.As(err, &missing) {
			return fail(err)
		}
		if err := sitedynamo.CreateTable(ctx, db, *table); err != nil {
			return fail(err)
		}
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		return fail(err)
	}
	origin := "http://" + ln.Addr().String()
	ownPairURL := *verify == "" // a URL nothing serves here: the banner says how to approve instead
	if ownPairURL {
		*verify = origin + "/pair"
	}
	clock := sitestore.NewOffsetClock(nil)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The cloud lane's pump: each invocation a goroutine, started as the
	// deployed one is (the app's enqueue, its hand-over, its wake-ups).
	pumps := &localsitepump.InProcess{Returned: func(ev sitepump.Event, rep sitepump.Report, err error) {
		if rep.Pumped || err != nil {
			fmt.Fprintf(stdout, "pump (%s): sealed %d, ended %d, late %d; %s %v\n", ev.Trigger, rep.Sealed, rep.Ended, rep.Late, rep.Stopped, errOrNil(err))
		}
	}}
	st, err := sitefn.Open(sitefn.Env{TableName: *table, VerificationURL: *verify, LeaseMs: *leaseMs, PairingTTLMs: *pairingTTL,
		RelayURL: *relayURL, SiteID: *relaySite},
		sitefn.Options{DB: db, Keys: keys, Clock: clock, Logger: log, Starter: pumps, Waker: pumps})
	if err != nil {
		return fail(err)
	}
	if *lane == siteserver.LaneCloud {
		if pumps.Handle, err = st.PumpHandler(); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "cloud lane: publishing through %s as site %s (site key id %s); the relay must hold this site's public keys\n", *relayURL, *relaySite, keys.KeyID())
		// A job left in flight by an earlier run gets a pump now.
		_ = pumps.Start(ctx, sitepump.Event{Trigger: sitepump.TriggerInvoke})
	}
	// The keys were given: built already, nothing to wait for.
	server, err := st.Server(ctx)
	if err != nil {
		return fail(err)
	}
	if world != nil {
		if err := world.SeedSite(ctx, server, st.Store); err != nil {
			return fail(err)
		}
	}
	api, err := apiserver.ForSiteStack(st, apiserver.Config{Log: log})
	if err != nil {
		return fail(err)
	}
	served := make(chan error, 2)
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()
	if *adminPort != 0 {
		aln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *adminPort))
		if err != nil {
			return fail(err)
		}
		admin := &http.Server{Handler: siteserver.NewAdmin(server, st.Store, clock), ReadHeaderTimeout: 10 * time.Second}
		go func() { served <- admin.Serve(aln) }()
		defer admin.Close()
		fmt.Fprintf(stdout, "TEST-ONLY admin API (can wipe the table and move the clock): http://%s/admin/\n", aln.Addr())
	}
	// The scheduled sweeper's stand-in; claims and heartbeats sweep in-line.
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = server.Sweep(ctx)
			}
		}
	}()
	// The daemon as docs/site.md runs it: the npm one, its state beside
	// the site's keys and apart from the person's own ~/.byollm.
	home := filepath.Join(filepath.Dir(*keysPath), "byollm-home")
	if dir, err := localstack.Dir(); err == nil && world != nil {
		home = filepath.Join(dir, "byollm-home")
	}
	fmt.Fprintf(stdout, "site %s serving\n  daemons:  HOME=%s localtest/js/node_modules/.bin/byollm connect %s\n  app API:  POST %s/app/{enqueue,job,result,cancel,availability,pairings/lookup,pairings/approve,pairings/deny,runners,runners/revoke,sweep}\n  table:    %s on %s\n",
		keys.KeyID(), home, origin, origin, *table, endpoint)
	if *ddbDir != "" {
		fmt.Fprintf(stdout, "            kept in %s across runs (--fresh, or make site FRESH=1, starts empty)\n", *ddbDir)
	}
	if ownPairURL {
		// The daemon prints the verification URL as the place to approve;
		// nothing serves it here (a site's own page would), so say how.
		fmt.Fprintf(stdout, "  pairing:  nothing here serves the URL the daemon prints (%s/pair, a real site's page: --verification-url);\n"+
			"            check the code's fingerprint is the one the daemon printed: curl -X POST %s/app/pairings/lookup -d '{\"userCode\":\"XXXX-XXXX\"}'\n"+
			"            then approve it: curl -X POST %s/app/pairings/approve -d '{\"userCode\":\"XXXX-XXXX\",\"owner\":\"alice\"}'\n", origin, origin, origin)
	}
	if world != nil {
		fmt.Fprintf(stdout, "  demo:     %s paired for %s, %s queued; one function against this stack:\n            TABLE_NAME=%s AWS_ENDPOINT_URL_DYNAMODB=%s make invoke FN=siteclaim\n",
			demo.RunnerID, demo.Owner, demo.JobID, *table, endpoint)
	}
	select {
	case <-ctx.Done():
		return 0
	case err := <-served:
		return fail(err)
	}
}

// siteDemoDDBDir is where, under the demo dir, make site --demo keeps its
// table: beside the demo keys its pairings name, apart from make run's.
const siteDemoDDBDir = "site-dynamodb"

// defaultSiteDDBDir is where make site keeps its table across runs: beside
// the keys whose identity its pairings pin (.cache/site, or the demo dir
// with --demo).
func defaultSiteDDBDir(demoWorld bool) (string, error) {
	if demoWorld {
		dir, err := localstack.Dir()
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, siteDemoDDBDir), nil
	}
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("%w (pass --ddb-dir)", err)
	}
	return filepath.Join(root, ".cache", "site", ddbDirName), nil
}

// siteKeysFile is the name of the keys file make site keeps.
const siteKeysFile = "site-keys.json"

// defaultSiteKeys is where make site keeps its keys: .cache/site, with
// every other key of the local stacks, git-ignored. Keys an earlier
// version left at the repository's root are still read there, and the
// run says how to move them: daemons pin that identity, so a new key in
// the new place would orphan every pairing.
func defaultSiteKeys(stdout io.Writer) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("%w (pass --keys)", err)
	}
	path := filepath.Join(root, ".cache", "site", siteKeysFile)
	old := filepath.Join(root, siteKeysFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(old); err == nil {
			fmt.Fprintf(stdout, "site keys read from %s, where earlier versions kept them; they belong in %s:\n  mkdir -p %s && mv %s %s\n",
				old, path, filepath.Dir(path), old, path)
			return old, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, nil
}

// loadOrCreateSiteKeys reads the site's keys, or makes and saves a pair:
// the site's identity must survive restarts, or every paired daemon's pin
// breaks.
func loadOrCreateSiteKeys(path string, stdout io.Writer) (*protocol.Keys, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		return sitefn.ParseKeys(raw)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	k, err := protocol.GenerateKeys()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(k.Stored(time.Now().UnixMilli()), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "new site keys written to %s (keep them: daemons pin this identity)\n", path)
	return k, nil
}

// errOrNil prints an invocation's error, or nothing.
func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}
