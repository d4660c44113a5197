package hotkeys_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/bench/partkey"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/dynamo"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// shape is a fleet and its workload: sites, each with ownersPerSite
// owners who consent to it and to no other, each owner with one device;
// in wave n, each site publishes one job for each of waves[n] of its
// owners (owners no earlier wave gave a job), and every job is claimed,
// sealed, fetched, answered and collected.
type shape struct {
	sites, ownersPerSite int
	waves                []int
}

func (s shape) devices() int { return s.sites * s.ownersPerSite }

// The fleets: ten sites of ten owners each, and one site all 100 owners
// consent to, whose requests all name it.
var (
	tenSites = shape{sites: 10, ownersPerSite: 10, waves: []int{6, 3}}
	oneSite  = shape{sites: 1, ownersPerSite: 100, waves: []int{60, 39}}
)

// requests is what each workload sends: a tick of every device (a
// heartbeat and a claim each) before the first wave and in each wave; four
// requests of each job's own (enqueue, payload, fetch, result); and in
// each wave one pending and one results poll per site. Ten sites: 3 ticks
// of 200, 90 jobs of 4, 2 waves of 20 polls; one site: 3 ticks of 200,
// 99 jobs of 4, 2 waves of 2 polls.
const requests = 1000

// planned is the number of requests the workload's plan sends.
func (s shape) planned() int {
	n := 2 * s.devices() // the idle tick
	for _, jobs := range s.waves {
		n += 2*s.devices() + 4*jobs*s.sites + 2*s.sites
	}
	return n
}

// hottestAllowed is the most requests any one partition key may be touched
// by: an eighth. A key over it is one that a fixed share of every
// request reads or writes, whatever the fleet: it caps the relay at its
// partition's rate.
const hottestAllowed = requests / 8

// The ten hottest keys are printed.
const hotKeys = 10

// A workload of 100 daemons of 100 owners across 10 sites, 1,000 signed
// requests from the Go daemons and sites, against the deployed wiring on
// DynamoDB Local. Each request's DynamoDB calls are named by the partition
// keys they touch (table and index); no key may be touched by more than an
// eighth of the requests, and no request may Scan.
func TestNoPartitionKeyIsHot(t *testing.T) { noKeyIsHot(t, tenSites) }

// The same with every owner consenting to one site: a popular site is
// where the fleet concentrates, so its keys must spread as the fleet's do.
// Every request names the site, so a key of the site's alone (its record,
// its unsealed sets, its finished list) touched by each of its requests
// caps one site at one partition's rate.
func TestNoPartitionKeyIsHotForOneSite(t *testing.T) { noKeyIsHot(t, oneSite) }

func noKeyIsHot(t *testing.T, sh shape) {
	if sh.planned() != requests {
		t.Fatalf("the plan sends %d requests, not %d", sh.planned(), requests)
	}
	ctx := context.Background()
	m := &meter{requests: map[string]*touch{}, outside: map[string]int{}}
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	cfg.APIOptions = append(cfg.APIOptions, m.apiOption)
	table := localtest.UniqueName("hotkeys")
	db := dynamodb.NewFromConfig(cfg)
	if err := dynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, db, table)

	quiet := slog.New(slog.DiscardHandler)
	// The deployed defaults, but for a longer awaiting window: on a loaded
	// machine the sites' seal may come more than the default 10 s after
	// the claims, and a requeued job would be a workload not run as
	// planned. The window decides when a job is swept, not which keys
	// any request touches.
	env := lambdafn.Env{TableName: table, MetricsNamespace: "byorelay", AwaitingPayloadMs: 60_000}
	st, err := lambdafn.Open(env, lambdafn.Options{AWS: &cfg, Logger: quiet, MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, sh)
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: st.Control, Pairings: st.Store, Logger: quiet})
	if _, err := admin.Import(ctx, f.fixture()); err != nil {
		t.Fatalf("import the fixture: %v", err)
	}
	api, err := apiserver.ForStack(st, apiserver.Config{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	w := f.connect(t, srv.URL)
	start := time.Now()
	m.recording.Store(true)
	w.run(ctx)
	m.recording.Store(false)
	t.Logf("%d requests sent, %d served, in %v", w.sent.Load(), served.Load(), time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return // the workload did not run as planned; its counts mean nothing
	}
	if got := w.sent.Load(); got != requests || served.Load() != requests {
		t.Fatalf("the clients sent %d requests and the relay served %d, want %d", got, served.Load(), requests)
	}
	m.check(t)
}

// checkSchema fails unless internal/bench/partkey knows the partition key of the
// table and of every index it has: a call on an index it does not know
// would be counted under no key, and could hide a hot one.
func checkSchema(t *testing.T, db *dynamodb.Client, table string) {
	t.Helper()
	out, err := db.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(index string, schema []types.KeySchemaElement) {
		for _, k := range schema {
			if k.KeyType != types.KeyTypeHash {
				continue
			}
			if known, ok := partkey.HashKey(index); !ok || known != aws.ToString(k.AttributeName) {
				t.Fatalf("index %q is keyed by %s; internal/bench/partkey names its partitions by %q (known: %v): add it there",
					index, aws.ToString(k.AttributeName), known, ok)
			}
		}
	}
	check("", out.Table.KeySchema)
	for _, ix := range out.Table.GlobalSecondaryIndexes {
		check(aws.ToString(ix.IndexName), ix.KeySchema)
	}
}

// meter records, for every request, the partition keys its DynamoDB calls
// touch. It is SDK middleware on the stack's AWS config, so it sees every
// call the relay and the control plane make, and it tells requests apart
// by the Lambda context the API server puts on each invocation, as a
// deployed function's context carries it.
type meter struct {
	recording atomic.Bool

	mu       sync.Mutex
	requests map[string]*touch // by AWS request id
	// outside counts, by key, calls made while recording that carry no
	// invocation: work no request's count would show.
	outside map[string]int
}

// touch is what one request touched.
type touch struct {
	function string
	keys     map[string]bool
	scans    int
	unknown  int
}

func (m *meter) apiOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("HotKeysCount",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			// Counted before the call: a refused conditional write has
			// still reached its partition.
			m.record(ctx, in.Parameters)
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

func (m *meter) record(ctx context.Context, params any) {
	if !m.recording.Load() {
		return
	}
	keys := partkey.Touched(params)
	m.mu.Lock()
	defer m.mu.Unlock()
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok || lc.AwsRequestID == "" {
		for _, k := range keys {
			m.outside[k]++
		}
		return
	}
	r := m.requests[lc.AwsRequestID]
	if r == nil {
		arn := lc.InvokedFunctionArn
		r = &touch{function: arn[strings.LastIndex(arn, ":")+1:], keys: map[string]bool{}}
		m.requests[lc.AwsRequestID] = r
	}
	for _, k := range keys {
		switch k {
		case partkey.Scan:
			r.scans++
		case partkey.Unknown:
			r.unknown++
		default:
			r.keys[k] = true
		}
	}
}

// keyCount is one key and how many requests touched it, by function.
type keyCount struct {
	key        string
	requests   int
	byFunction map[string]int
}

// check fails on a Scan or an unnamed call in any request, on calls made
// outside every request, and on any key touched by more than
// hottestAllowed requests; it logs the ten hottest keys either way.
func (m *meter) check(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	counts := map[string]*keyCount{}
	scans, unknown := map[string]int{}, 0
	for _, r := range m.requests {
		if r.scans > 0 {
			scans[r.function] += r.scans
		}
		unknown += r.unknown
		for k := range r.keys {
			c := counts[k]
			if c == nil {
				c = &keyCount{key: k, byFunction: map[string]int{}}
				counts[k] = c
			}
			c.requests++
			c.byFunction[r.function]++
		}
	}
	ranked := make([]*keyCount, 0, len(counts))
	for _, c := range counts {
		ranked = append(ranked, c)
	}
	slices.SortFunc(ranked, func(a, b *keyCount) int {
		if c := cmp.Compare(b.requests, a.requests); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	report := hottest(ranked)
	t.Logf("%d requests made DynamoDB calls, touching %d partition keys; the hottest:\n%s", len(m.requests), len(ranked), report)

	if len(scans) > 0 {
		t.Errorf("requests scanned the table (Scans by function: %v): a Scan reads every partition, and has no place on the request path", scans)
	}
	if unknown > 0 {
		t.Errorf("%d calls made by requests name no partition internal/bench/partkey can read: they are counted under no key, and could hide a hot one", unknown)
	}
	if len(m.outside) > 0 {
		t.Errorf("calls during the workload carried no request (by key: %v): work done outside every request escapes this count", m.outside)
	}
	var over []string
	for _, c := range ranked {
		if c.requests > hottestAllowed {
			over = append(over, fmt.Sprintf("%s (%d)", c.key, c.requests))
		}
	}
	if len(over) > 0 {
		t.Errorf("%d keys are each touched by more than an eighth (%d) of the %d requests: %s. One partition serves at most 3,000 strongly consistent reads and 1,000 writes a second, so a key that a fixed share of all requests touch caps the whole relay. The ten hottest:\n%s",
			len(over), hottestAllowed, requests, strings.Join(over, ", "), report)
	}
}

// hottest is the first hotKeys keys, one a line: requests, key, and the
// functions whose requests touched it.
func hottest(ranked []*keyCount) string {
	var b strings.Builder
	for _, c := range ranked[:min(hotKeys, len(ranked))] {
		fns := make([]string, 0, len(c.byFunction))
		for fn, n := range c.byFunction {
			fns = append(fns, fmt.Sprintf("%s %d", strings.TrimSuffix(fn, "Function"), n))
		}
		slices.Sort(fns)
		fmt.Fprintf(&b, "  %5d of %d  %-24s  %s\n", c.requests, requests, c.key, strings.Join(fns, ", "))
	}
	return b.String()
}

// fleet is the sites and devices, with keys generated for this run.
type fleet struct {
	shape   shape
	sites   []*relaytest.Site
	devices []*relaytest.Daemon
}

func newFleet(t *testing.T, shape shape) *fleet {
	f := &fleet{shape: shape}
	for s := range shape.sites {
		f.sites = append(f.sites, relaytest.NewSite(t, fmt.Sprintf("site-%02d", s)))
	}
	for d := range shape.devices() {
		f.devices = append(f.devices, relaytest.NewDaemon(t, fmt.Sprintf("runner-%03d", d), fmt.Sprintf("owner-%03d", d)))
	}
	return f
}

// siteOf is the site device d's owner consents to.
func (f *fleet) siteOf(d int) int { return d / f.shape.ownersPerSite }

// fixture is the projection: every site registered, every device approved
// for its owner, each owner consenting to its one site.
func (f *fleet) fixture() projection.Fixture {
	b := relaytest.NewFixture().Site(f.sites...).Device(f.devices...)
	for d, dev := range f.devices {
		b.Consent(dev.Owner, f.sites[f.siteOf(d)].SiteID)
	}
	return b.Build()
}

// workload is the fleet's clients on one relay.
type workload struct {
	t       *testing.T
	fleet   *fleet
	sites   []*site.Client
	daemons []*daemon.Daemon
	// sent counts the requests the clients put on the wire.
	sent *atomic.Int64
	// fetches holds each wave's fetches until its sites have sealed, so a
	// fetch finds its payload the first time and the count is exact.
	fetches *gate
	// reported receives a job id each time a daemon's result is accepted.
	reported chan string
}

func (f *fleet) connect(t *testing.T, url string) *workload {
	t.Helper()
	sent := &atomic.Int64{}
	w := &workload{t: t, fleet: f, sent: sent, fetches: &gate{}, reported: make(chan string, f.shape.devices())}
	counted := &counting{next: http.DefaultTransport, n: sent}
	for _, s := range f.sites {
		c, err := site.New(site.Config{RelayURL: url, SiteID: s.SiteID, Keys: s.Keys,
			HTTPClient: &http.Client{Transport: counted, Timeout: 30 * time.Second},
			// One try: a retry would be a request the plan does not count,
			// and an answer worth retrying is a failure here.
			MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		w.sites = append(w.sites, c)
	}
	held := &http.Client{Transport: &holding{gate: w.fetches, next: counted}, Timeout: 30 * time.Second}
	for _, dev := range f.devices {
		d, err := daemon.New(daemon.Config{RelayURL: url, Keys: dev.Keys, Backend: daemon.EchoBackend{},
			Pairing:    daemon.Pairing{RunnerID: dev.RunnerID, Owner: dev.Owner},
			HTTPClient: held,
			OnEvent:    w.onEvent(dev.RunnerID)})
		if err != nil {
			t.Fatal(err)
		}
		w.daemons = append(w.daemons, d)
	}
	return w
}

// onEvent passes on accepted results and fails the test on anything that
// is not the plan: a job refused, lost or in error is a workload that did
// not run.
func (w *workload) onEvent(runner string) func(daemon.Event) {
	return func(e daemon.Event) {
		switch e.Type {
		case daemon.EventReported:
			w.reported <- e.JobID
		case daemon.EventRefused, daemon.EventLost, daemon.EventError, daemon.EventCancelled,
			daemon.EventSiteRefused, daemon.EventSiteDropped, daemon.EventRevoked, daemon.EventServingNothing:
			w.t.Errorf("%s: %s %s %s", runner, e.Type, e.JobID, e.Detail)
		}
	}
}

// run is the workload: every device ticks (heartbeat and claim) with
// nothing queued; then each wave: the sites publish, every device ticks
// and those with a job claim it, the sites seal for them, the devices
// fetch and answer, and the sites collect the results.
func (w *workload) run(ctx context.Context) {
	w.tick(ctx, 0)
	first := 0
	for n, jobs := range w.fleet.shape.waves {
		w.fetches.hold()
		ids := w.publish(ctx, n, first, jobs)
		w.tick(ctx, len(ids))
		w.seal(ctx, len(ids))
		w.fetches.release()
		w.awaitResults(ids)
		w.collect(ctx, ids)
		first += jobs
		if w.t.Failed() {
			return
		}
	}
}

// parallel runs do(i) for i in [0, n) on a few goroutines, as many clients
// at once would, and fails the test on the first error.
func (w *workload) parallel(what string, n int, do func(i int) error) {
	w.t.Helper()
	const workers = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				errs[i] = do(i)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		w.t.Errorf("%s: %v", what, err)
	}
}

// tick is one heartbeat and claim from every device; claimed is how many
// jobs the devices must take between them.
func (w *workload) tick(ctx context.Context, claimed int) {
	var got atomic.Int64
	w.parallel("tick", len(w.daemons), func(i int) error {
		n, err := w.daemons[i].Tick(ctx)
		got.Add(int64(n))
		return err
	})
	if got.Load() != int64(claimed) {
		w.t.Errorf("the devices claimed %d jobs, want %d", got.Load(), claimed)
	}
}

// publish has each site publish one job for each of its owners first …
// first+jobs-1, and returns their ids.
func (w *workload) publish(ctx context.Context, wave, first, jobs int) []string {
	type job struct {
		site  int
		owner string
		id    string
	}
	var all []job
	for s := range w.sites {
		for o := first; o < first+jobs; o++ {
			dev := w.fleet.devices[s*w.fleet.shape.ownersPerSite+o]
			all = append(all, job{site: s, owner: dev.Owner, id: fmt.Sprintf("w%d-%s", wave, dev.Owner)})
		}
	}
	deadline := time.Now().Add(2 * time.Minute).UnixMilli()
	w.parallel("publish", len(all), func(i int) error {
		j := all[i]
		stub := protocol.JobStub{ID: j.id, Kind: protocol.KindGenerate, Owner: j.owner,
			Audience: protocol.AudiencePrivate, DeadlineAt: deadline}
		_, err := w.sites[j.site].Publish(ctx, stub, protocol.GeneratePayload("count the keys for "+j.owner))
		return err
	})
	ids := make([]string, len(all))
	for i, j := range all {
		ids[i] = j.id
	}
	return ids
}

// seal has every site read its pending claims and seal a payload to each
// device; want is how many payloads they must post between them.
func (w *workload) seal(ctx context.Context, want int) {
	var sealed atomic.Int64
	w.parallel("seal", len(w.sites), func(i int) error {
		rep, err := w.sites[i].PumpSeals(ctx)
		sealed.Add(int64(len(rep.Sealed)))
		return reportErr(rep, err)
	})
	if sealed.Load() != int64(want) {
		w.t.Errorf("the sites sealed %d payloads, want %d", sealed.Load(), want)
	}
}

// awaitResults waits until the daemons' results for ids are accepted.
func (w *workload) awaitResults(ids []string) {
	w.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case id := <-w.reported:
			if !want[id] {
				w.t.Errorf("a result for %s, which this wave did not publish", id)
			}
			delete(want, id)
		case <-timeout:
			w.t.Errorf("no result accepted for %d jobs after 30 s", len(want))
			return
		}
	}
}

// collect has every site poll its results once; each must verify this
// wave's jobs of its own.
func (w *workload) collect(ctx context.Context, ids []string) {
	var verified sync.Map
	w.parallel("collect", len(w.sites), func(i int) error {
		rep, err := w.sites[i].PumpResults(ctx)
		for _, r := range rep.Results {
			verified.Store(r.JobID, true)
		}
		return reportErr(rep, err)
	})
	for _, id := range ids {
		if _, ok := verified.Load(id); !ok {
			w.t.Errorf("%s: no verified result collected", id)
		}
	}
}

// reportErr is a pump's error, or its report's refusals and deferrals as
// one: either is a cycle that did not go as planned.
func reportErr(rep site.Report, err error) error {
	switch {
	case err != nil:
		return err
	case len(rep.Refused) > 0:
		return fmt.Errorf("refused: %+v", rep.Refused)
	case rep.Deferred != "":
		return fmt.Errorf("deferred: %s", rep.Deferred)
	}
	return nil
}

// counting counts every request it puts on the wire.
type counting struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// holding holds a daemon's fetch until its gate opens; every other request
// goes straight on.
type holding struct {
	gate *gate
	next http.RoundTripper
}

func (h *holding) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/fetch") {
		if err := h.gate.wait(r.Context()); err != nil {
			return nil, err
		}
	}
	return h.next.RoundTrip(r)
}

// gate is closed by hold and opened by release.
type gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func (g *gate) hold() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open == nil {
		return nil
	}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
