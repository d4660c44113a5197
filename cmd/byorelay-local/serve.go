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
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

// grantKeyFile is the local control-plane key, beside the demo keys.
const grantKeyFile = "control-plane-grant.key"

// The stores serve can run the relay on.
const (
	storeDynamo = "dynamodb"
	storeMemory = "memory"
)

// serveOptions are serve's flags.
type serveOptions struct {
	store       string
	host        string
	port        int
	ddbEndpoint string
	table       string
	demoDir     string
	debug       bool
	sweepEvery  time.Duration
	lease       time.Duration
	awaiting    time.Duration
	dueShards   int
	siteCopies  int
	// unsealedShards and finishedShards are the routing table's per-site
	// shard counts (UNSEALED_SHARDS, FINISHED_SHARDS when deployed).
	unsealedShards int
	finishedShards int
	quiet          bool
	verbose        bool
	grants         bool
	grantKMSKey    string
	exposeAdmin    bool
	fresh          bool
}

// ddbDirName is where, under the demo dir, the DynamoDB Local that serve
// starts keeps its tables: beside the demo keys, since the pairings and
// the projection in it name those keys.
const ddbDirName = "dynamodb"

func parseServeFlags(args []string, stderr io.Writer) (serveOptions, error) {
	var o serveOptions
	fs := flag.NewFlagSet("byorelay-local serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", storeDynamo, "dynamodb: every function of template.yaml over DynamoDB Local, as deployed,\nits tables kept across runs (--fresh starts empty);\nmemory: the relay and its admin API on plain net/http over this process's memory,\nas the reference relay runs (no Java; everything is gone when it stops)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; anything but loopback needs --expose-admin")
	fs.IntVar(&o.port, "port", 8787, "port for every function (0 picks a free one)")
	fs.StringVar(&o.ddbEndpoint, "ddb-endpoint", "", "use this DynamoDB endpoint instead of starting DynamoDB Local\n(also $"+localtest.EnvDynamoEndpoint+")")
	fs.StringVar(&o.table, "table", "byorelay-local", "routing table name; created if missing")
	fs.BoolVar(&o.fresh, "fresh", false, "start with empty tables: delete what the DynamoDB Local serve starts kept from\nits last run (pairings, jobs, the projection) in <demo-dir>/"+ddbDirName+"; the keys stay")
	fs.StringVar(&o.demoDir, "demo-dir", "", "where the demo keys are kept, made on first run and reused after\n(default $"+localstack.EnvDir+", else .cache/demo in the repository)")
	fs.BoolVar(&o.debug, "debug", false, "serve the relay's /debug page (?site=demo-site)")
	fs.DurationVar(&o.sweepEvery, "sweep-every", time.Minute, "how often the sweeper runs, as its schedule does when deployed")
	fs.DurationVar(&o.lease, "lease", time.Duration(store.DefaultLeaseMs)*time.Millisecond, "how long a claim's lease lasts without a heartbeat (LEASE_MS when deployed)")
	fs.DurationVar(&o.awaiting, "awaiting", time.Duration(store.AwaitingPayloadMs)*time.Millisecond, "how long a site has to seal a claimed job before it is requeued\n(AWAITING_PAYLOAD_MS when deployed)")
	fs.IntVar(&o.dueShards, "due-shards", dynamo.DefaultDueShards, "shards of the routing table's due index, a table setting: keep it for a table\n(DUE_SHARDS, template.yaml's DueShards, when deployed)")
	fs.IntVar(&o.siteCopies, "site-copies", controlplane.DefaultSiteCopies, "read copies of each site's record in the routing table, a table setting: keep it\nfor a table (SITE_COPIES, template.yaml's SiteCopies, when deployed; --store memory\nkeeps none)")
	fs.IntVar(&o.unsealedShards, "unsealed-shards", dynamo.DefaultUnsealedShards, "shards of each site's unsealed sets, a table setting: keep it for a table, or raise it\n(UNSEALED_SHARDS, template.yaml's UnsealedShards, when deployed)")
	fs.IntVar(&o.finishedShards, "finished-shards", dynamo.DefaultFinishedShards, "shards of each site's finished list, a table setting: keep it for a table, or raise it\n(FINISHED_SHARDS, template.yaml's FinishedShards, when deployed)")
	fs.BoolVar(&o.quiet, "quiet", false, "log only warnings and errors")
	fs.BoolVar(&o.verbose, "v", false, "also log every request: the relay's request and decision lines, and the\nrouting (function, status, time); without it only warnings, errors and\nchanges (an approval, an import) are logged")
	fs.BoolVar(&o.exposeAdmin, "expose-admin", false, "allow a non-loopback --host: the admin API (guarded by the per-run token,\nsent in clear over plain HTTP) is then reachable from the network too")
	fs.BoolVar(&o.grants, "grants", false, "author grants with a control-plane key kept in the demo dir: daemons paired\nfrom now on run in relayed mode (a grant on every job, roster members' jobs too)")
	fs.StringVar(&o.grantKMSKey, "grant-kms-key", "", "author grants as --grants does, signed by this AWS KMS key (id or ARN; key spec\nECC_NIST_EDWARDS25519) instead of a key file, as GrantKmsKeyId does when deployed;\nregion, credentials and AWS_ENDPOINT_URL_KMS come from the environment")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay-local serve [flags]\n\nThe local stack: DynamoDB Local and every function of template.yaml on one\nport, routed as API Gateway routes them, with a demo projection; or, with\n--store memory, the relay alone in this process's memory.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	if o.store != storeDynamo && o.store != storeMemory {
		return o, fmt.Errorf("--store must be %s or %s, not %q", storeDynamo, storeMemory, o.store)
	}
	if o.sweepEvery <= 0 {
		return o, errors.New("--sweep-every must be positive")
	}
	if o.lease < time.Millisecond || o.awaiting < time.Millisecond {
		return o, errors.New("--lease and --awaiting must be at least 1ms")
	}
	if o.fresh && o.store != storeDynamo {
		return o, errors.New("--fresh empties the DynamoDB Local serve starts; with --store memory there is none")
	}
	if o.grants && o.grantKMSKey != "" {
		return o, errors.New("--grants keeps the key in a file and --grant-kms-key in KMS: pass one")
	}
	if o.dueShards < 1 || o.dueShards > dynamo.MaxDueShards {
		return o, fmt.Errorf("--due-shards must be from 1 to %d", dynamo.MaxDueShards)
	}
	if o.siteCopies < 1 || o.siteCopies > controlplane.MaxSiteCopies {
		return o, fmt.Errorf("--site-copies must be from 1 to %d", controlplane.MaxSiteCopies)
	}
	if o.unsealedShards < 1 || o.unsealedShards > dynamo.MaxSiteShards || o.finishedShards < 1 || o.finishedShards > dynamo.MaxSiteShards {
		return o, fmt.Errorf("--unsealed-shards and --finished-shards must be from 1 to %d", dynamo.MaxSiteShards)
	}
	if !isLoopbackHost(o.host) && !o.exposeAdmin {
		return o, fmt.Errorf("--host %s would serve the admin API (approve devices, change consents) to the network with the relay;\n"+
			"keep the default --host 127.0.0.1, or pass --expose-admin to serve both there (the admin token travels in clear over HTTP)", o.host)
	}
	return o, nil
}

// runServe is `byorelay-local serve`: up, report, serve until ctx ends, down.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseServeFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "byorelay-local serve: %v\n", err)
		return 2
	}
	log := serveLogger(opts, stderr)

	ls, err := startLocal(ctx, opts, log, stdout)
	if err != nil && ctx.Err() != nil {
		// Ctrl-C while starting (DynamoDB Local can take a while): what
		// was started is stopped, and the person asked for it.
		fmt.Fprintln(stdout, "\nstopped before the stack was up")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "byorelay-local serve: %v\n", err)
		return 1
	}
	defer ls.close()
	ls.printBanner(stdout)

	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "\nstopping…")
		return 0
	case err := <-ls.served:
		fmt.Fprintf(stderr, "byorelay-local serve: %v\n", err)
		return 1
	}
}

// localStack is a running local stack.
type localStack struct {
	store       string // storeDynamo or storeMemory
	url         string
	ddbEndpoint string
	ddbDir      string // where the DynamoDB Local serve started keeps its tables; "" when none was started
	table       string
	demoDir     string
	demo        *demo.World
	siteEnv     string
	stackEnv    string   // the file `byorelay-local demo` and `admin` read to find this stack
	adminToken  string   // the admin API's bearer token for this run
	hosts       []string // Host headers the admin API answers to; nil: any
	grantKey    string   // where the control-plane key is held (a file, or a KMS key ARN); "" in direct mode
	imported    bool     // the demo projection was imported (the table had none)
	version     int64    // the demo import's version stamp, when imported
	debug       bool

	listener   net.Listener
	srv        *http.Server
	served     chan error
	stopSweep  context.CancelFunc
	sweepDone  chan struct{}
	stopDynamo func()
}

// startLocal brings the stack up: DynamoDB (started or given), the table,
// the demo keys and projection, the functions, the sweeper's schedule, the
// listener. On error everything already started is stopped again.
func startLocal(ctx context.Context, opts serveOptions, log *slog.Logger, progress io.Writer) (_ *localStack, err error) {
	ls := &localStack{table: opts.table, debug: opts.debug, stopDynamo: func() {}}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()

	// Listen first: a taken port must fail at once, not after DynamoDB
	// Local took its time to start, nor after the banner named the URL.
	if ls.listener, err = net.Listen("tcp", net.JoinHostPort(opts.host, strconv.Itoa(opts.port))); err != nil {
		return nil, fmt.Errorf("%w (another `make run`? pick another port, or a free one: make run RUN_FLAGS='--port 0'; the banner prints it and make demo finds it)", err)
	}
	ls.url, ls.hosts = usableURL(ls.listener.Addr().(*net.TCPAddr))
	if opts.exposeAdmin {
		ls.hosts = nil // any Host: other machines name this one as they like
	}
	if ls.adminToken, err = controlplane.NewAdminToken(); err != nil {
		return nil, err
	}

	// The demo keys are shared with `byorelay-local invoke` (localtest/demo), so
	// a sample event it re-signs is accepted here too.
	if ls.demoDir = opts.demoDir; ls.demoDir == "" {
		if ls.demoDir, err = localstack.Dir(); err != nil {
			return nil, err
		}
	}

	ls.store = opts.store
	if opts.store == storeDynamo {
		if ls.ddbEndpoint = opts.ddbEndpoint; ls.ddbEndpoint == "" {
			ls.ddbEndpoint = os.Getenv(localtest.EnvDynamoEndpoint)
		}
		if ls.ddbEndpoint != "" && opts.fresh {
			return nil, fmt.Errorf("--fresh empties the DynamoDB Local serve starts, and this run uses the one at %s", ls.ddbEndpoint)
		}
		if ls.ddbEndpoint == "" {
			if err := ls.startDynamo(opts.fresh, progress); err != nil {
				return nil, err
			}
		}
		if err := ensureTable(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ls.ddbEndpoint)), opts.table); err != nil {
			return nil, err
		}
	}
	if ls.demo, err = demo.Load(ls.demoDir); err != nil {
		return nil, fmt.Errorf("demo keys: %w", err)
	}
	if ls.siteEnv, err = writeSiteEnv(ls.demoDir, ls.demo, ls.url, time.Now()); err != nil {
		return nil, fmt.Errorf("demo site env: %w", err)
	}
	if ls.stackEnv, err = localstack.Write(ls.demoDir, localstack.Stack{URL: ls.url, AdminToken: ls.adminToken}); err != nil {
		return nil, fmt.Errorf("stack env: %w", err)
	}

	var author *grants.Author
	if opts.grantKMSKey != "" {
		if author, ls.grantKey, err = kmsAuthor(ctx, opts.grantKMSKey); err != nil {
			return nil, err
		}
	}
	if opts.grants {
		ls.grantKey = filepath.Join(ls.demoDir, grantKeyFile)
		seed, err := grants.LoadOrCreateSeedFile(ls.grantKey)
		if err != nil {
			return nil, fmt.Errorf("control-plane key: %w", err)
		}
		if author, err = grants.New(seed, grants.Options{}); err != nil {
			return nil, err
		}
	}
	var b backend
	if opts.store == storeMemory {
		b, err = ls.memoryBackend(ctx, opts, author, log)
	} else {
		b, err = ls.dynamoBackend(ctx, opts, author, log)
	}
	if err != nil {
		return nil, err
	}

	sweepCtx, stopSweep := context.WithCancel(context.Background())
	ls.stopSweep, ls.sweepDone = stopSweep, make(chan struct{})
	go sweepEvery(sweepCtx, b.sweep, opts.sweepEvery, log, ls.sweepDone)

	guarded := controlplane.LocalGuard(controlplane.GuardConfig{Token: ls.adminToken, Hosts: ls.hosts}, withStreams(b.relay, b.gateway))
	ls.srv = &http.Server{Handler: guarded, ReadHeaderTimeout: 10 * time.Second}
	ls.served = make(chan error, 1)
	go func() { ls.served <- ls.srv.Serve(ls.listener) }()
	return ls, nil
}

// startDynamo starts DynamoDB Local on its tables under the demo dir
// (startKeptDynamo).
func (ls *localStack) startDynamo(fresh bool, progress io.Writer) (err error) {
	ls.ddbDir = filepath.Join(ls.demoDir, ddbDirName)
	ls.ddbEndpoint, ls.stopDynamo, err = startKeptDynamo(ls.ddbDir, fresh, progress)
	return err
}

// backend is what a store brings up: the relay, what serves every
// request, and the sweep the schedule would run.
type backend struct {
	relay   *relay.Relay
	gateway http.Handler
	sweep   func(context.Context) error
}

// verificationURL is where the daemon's printed URL points. Device-code
// pairing is off without one (501); here it is the operator console, so
// the URL opens a page where the code is approved.
func (ls *localStack) verificationURL() string { return ls.url + controlplane.ConsolePath }

// dynamoBackend is every function of template.yaml over one lambdafn.Stack
// on the table, behind the local API server: the deployed shape.
func (ls *localStack) dynamoBackend(ctx context.Context, opts serveOptions, author *grants.Author, log *slog.Logger) (backend, error) {
	env := lambdafn.Env{
		TableName:         opts.table,
		Debug:             opts.debug,
		VerificationURL:   ls.verificationURL(),
		MetricsNamespace:  "byorelay",
		LeaseMs:           opts.lease.Milliseconds(),
		AwaitingPayloadMs: opts.awaiting.Milliseconds(),
		DueShards:         opts.dueShards,
		SiteCopies:        opts.siteCopies,
		UnsealedShards:    opts.unsealedShards,
		FinishedShards:    opts.finishedShards,
	}
	cfg := localtest.AWSConfig(ls.ddbEndpoint)
	st, err := lambdafn.Open(env, lambdafn.Options{AWS: &cfg, Logger: log, MetricsOut: io.Discard, RelayMetrics: newDeclineLog(log), Grants: author})
	if err != nil {
		return backend{}, err
	}
	// The stream and admin routes reach the relay and st.Store without the
	// functions' handlers, which wait for the store clock's first reading.
	st.Calibrate(ctx)
	r, err := st.Relay(ctx)
	if err != nil {
		return backend{}, err
	}
	if err := ls.loadProjection(ctx, st, log); err != nil {
		return backend{}, err
	}
	server, err := apiserver.ForStack(st, apiserver.Config{Log: log})
	if err != nil {
		return backend{}, err
	}
	sweep := st.SweepHandler()
	trigger, _ := json.Marshal(lambdafn.SweepEvent{Trigger: "schedule"})
	return backend{relay: r, gateway: server, sweep: func(ctx context.Context) error {
		_, err := sweep(ctx, trigger)
		return err
	}}, nil
}

// memoryBackend is the relay over the memory store, its projection in
// memory too, served straight on net/http with the admin API beside it:
// the reference relay's shape, with nothing to install but Go. A crash
// or a stop loses everything, as the reference does.
func (ls *localStack) memoryBackend(ctx context.Context, opts serveOptions, author *grants.Author, log *slog.Logger) (backend, error) {
	routing := memory.New(store.Options{AwaitingPayloadMs: opts.awaiting.Milliseconds()})
	control := controlplane.NewStore(controlplane.NewMemoryStorage())
	cfg := relay.Config{
		Store:           routing,
		Pairing:         routing,
		Projection:      control,
		VerificationURL: ls.verificationURL(),
		LeaseMs:         opts.lease.Milliseconds(),
		Debug:           opts.debug,
		Logger:          log,
		Metrics:         newDeclineLog(log),
	}
	if author != nil {
		cfg.ControlPlanePublic = author.Public()
		cfg.AuthorGrant = author.Grant
		// With grants only, as in the Lambda stack (lambdafn.Satisfiable).
		cfg.Satisfiable = lambdafn.Satisfiable(controlplane.NewSlots(control, routing))
	}
	r, err := relay.New(cfg)
	if err != nil {
		return backend{}, err
	}
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: control, Pairings: routing, Presence: routing, Queue: routing, Logger: log})
	demo := controlplane.NewAdmin(controlplane.AdminConfig{Store: control, Pairings: routing, Presence: routing, Queue: routing, Logger: reportedByBanner(log)})
	res, err := demo.Import(ctx, ls.demo.Fixture())
	if err != nil {
		return backend{}, fmt.Errorf("import demo projection: %w", err)
	}
	ls.version = res.Version
	ls.imported = true
	mux := http.NewServeMux()
	adminAPI := controlplane.AdminHandler(admin)
	mux.Handle(controlplane.AdminPrefix+"/", adminAPI)
	mux.Handle("/", r.HTTPHandler())
	return backend{relay: r, gateway: mux, sweep: func(ctx context.Context) error {
		_, err := r.Sweep(ctx)
		return err
	}}, nil
}

// loadProjection imports the demo projection into a table that has none. A
// table that has one (a persistent --ddb-endpoint) keeps it: re-importing
// would undo every pairing approved since.
func (ls *localStack) loadProjection(ctx context.Context, st *lambdafn.Stack, log *slog.Logger) error {
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: reportedByBanner(log)})
	empty, err := st.Control.Empty(ctx)
	if err != nil {
		return fmt.Errorf("read projection: %w", err)
	}
	if empty {
		res, err := admin.Import(ctx, ls.demo.Fixture())
		if err != nil {
			return fmt.Errorf("import demo projection: %w", err)
		}
		ls.imported, ls.version = true, res.Version
	}
	return nil
}

// ensureTable creates the routing table unless it exists.
func ensureTable(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var missing *types.ResourceNotFoundException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &missing):
		return dynamo.CreateTable(ctx, db, table)
	default:
		return fmt.Errorf("describe table %s: %w", table, err)
	}
}

// sweepEvery stands in for the EventBridge schedule that invokes the
// sweeper when deployed. Claims and pending sweep in-line, so this only
// decides how soon a job nobody asks about is requeued or dropped.
func sweepEvery(ctx context.Context, sweep func(context.Context) error, every time.Duration, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("scheduled sweep failed", "err", err)
			}
		}
	}
}

// close stops what started, in reverse. Safe on a half-started stack.
func (ls *localStack) close() {
	switch {
	case ls.srv != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = ls.srv.Shutdown(ctx)
		cancel()
	case ls.listener != nil:
		_ = ls.listener.Close()
	}
	if ls.stopSweep != nil {
		ls.stopSweep()
		<-ls.sweepDone
	}
	if ls.stopDynamo != nil {
		ls.stopDynamo()
	}
	if ls.stackEnv != "" {
		// A stack that is gone must not be found by the demo.
		localstack.Remove(ls.demoDir, ls.url)
	}
}

// isLoopbackHost reports whether a --host value keeps the stack on this
// machine.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// usableURL is the URL to print for a listener, and the Host headers the
// admin API should answer to. A listener on every interface (0.0.0.0, ::)
// is reached from this machine at loopback: http://[::]:8787 is not a
// URL a daemon or a browser can use.
func usableURL(addr *net.TCPAddr) (url string, hosts []string) {
	port := strconv.Itoa(addr.Port)
	ip := addr.IP
	if ip.IsUnspecified() {
		// Both 0.0.0.0 and a dual-stack :: accept IPv4 loopback.
		ip = net.IPv4(127, 0, 0, 1)
	}
	hostport := net.JoinHostPort(ip.String(), port)
	hosts = []string{hostport}
	if ip.IsLoopback() {
		// The names this machine knows itself by on loopback, and nothing
		// else: a foreign name resolved to 127.0.0.1 is DNS rebinding.
		hosts = []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port}
	}
	return "http://" + hostport, hosts
}
