package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	godaemon "github.com/byorelay/byorelay/client/daemon"
	gosite "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/dynamo"
)

// EnvScaleDevices sets how many devices TestScale loads: `make scale`
// loads 1,000,000, `make test` the default. EnvScaleSites sets how many
// sites they consent to, device i to site i mod sites: `make scale
// SCALE_SITES=1` puts every device on one site.
const (
	EnvScaleDevices = "BYORELAY_SCALE_DEVICES"
	EnvScaleSites   = "BYORELAY_SCALE_SITES"
)

const (
	defaultScaleDevices = 20_000
	defaultScaleSites   = 300
	// smallFleet is the fleet the first request's capacity is compared
	// with: a projection's size must not show in what a request costs.
	smallFleet = 10
	// oneSiteSmoke is the one-site fleet `make test` loads.
	oneSiteSmoke = 200
)

// TestScale loads a relay on DynamoDB Local with a fleet through the admin
// CLI's import (one owner per device, each consenting to one of 300
// sites, or of EnvScaleSites), then, from a newly started stack: one
// device heartbeats, claims and finishes a job, and a device revoked among
// them is refused on its next request. It reports the load's wall time and
// what the new stack's first request cost, which must equal the cost with
// 10 devices on as many sites.
func TestScale(t *testing.T) {
	n := envCount(t, EnvScaleDevices, defaultScaleDevices, smallFleet)
	sites := envCount(t, EnvScaleSites, defaultScaleSites, 1)
	scale(t, n, sites)
}

// TestScaleOfOneSite is TestScale's smoke with every device consenting to
// one site: a site's popularity must not show in what its device's
// request costs either.
func TestScaleOfOneSite(t *testing.T) { scale(t, oneSiteSmoke, 1) }

// envCount is the count env sets, at least least, or def when unset.
func envCount(t *testing.T, env string, def, least int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number of at least %d", env, v, least)
	}
	return n
}

// scale loads n devices over sites, then smallFleet over as many, and
// compares a new stack's first tick on each.
func scale(t *testing.T, n, sites int) {
	big := loadFleet(t, n, sites)
	small := loadFleet(t, smallFleet, sites)
	on := fmt.Sprintf("%d sites", sites)
	if sites == 1 {
		on = "one site"
	}
	t.Logf("load of %d devices and %d consents on %s through `byorelay admin import`: %s wall (file %d MB)",
		n, n, on, big.loadTime.Round(time.Millisecond), big.fileBytes>>20)
	t.Logf("the first requests of a newly started stack (one tick: a heartbeat and a claim): %s with %d devices, %s with %d, on %s",
		big.first, n, small.first, smallFleet, on)
	if big.first != small.first {
		t.Errorf("the first request cost %s at %d devices and %s at %d: a request's cost grows with the fleet", big.first, n, small.first, smallFleet)
	}
}

// fleetRun is what one load and its requests measured.
type fleetRun struct {
	loadTime  time.Duration
	fileBytes int64
	first     Capacity
}

func (c Capacity) String() string {
	return fmt.Sprintf("%d calls, %.1f RCU, %.1f WCU", c.Calls, c.ReadUnits, c.WriteUnits)
}

// loadFleet writes a fixture of n devices over sites to a file, imports it
// through the CLI into a fresh table, and drives a new stack's first
// requests.
func loadFleet(t *testing.T, n, sites int) fleetRun {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	table := localtest.UniqueName("scale")
	cfg := localtest.AWSConfig(localtest.DynamoEndpoint(t))
	if err := dynamo.CreateTable(ctx, dynamodb.NewFromConfig(cfg), table); err != nil {
		t.Fatal(err)
	}
	env := lambdafn.Env{TableName: table, MetricsNamespace: "byorelay", AwaitingPayloadMs: 60_000}

	file := filepath.Join(t.TempDir(), "fixture.json")
	keys := writeFleet(t, file, n, sites)
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}

	// The load: the admin CLI against the admin API of one stack.
	loader, err := lambdafn.Open(env, lambdafn.Options{AWS: &cfg, Logger: quiet, MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: loader.Control, Pairings: loader.Store, Logger: quiet})
	adminSrv := httptest.NewServer(controlplane.AdminHandler(admin))
	t.Cleanup(adminSrv.Close)
	var stdout bytes.Buffer
	progress := io.Writer(io.Discard)
	if testing.Verbose() {
		progress = os.Stderr
	}
	start := time.Now()
	if code := admincli.Run(ctx, []string{"--endpoint", adminSrv.URL, "import", file}, &stdout, progress); code != 0 {
		t.Fatalf("byorelay admin import: exit %d", code)
	}
	run := fleetRun{loadTime: time.Since(start), fileBytes: info.Size()}
	t.Logf("%d devices: %s", n, bytes.TrimSpace(stdout.Bytes()))

	// A newly started stack, metered from its first call.
	meter := newCapacityMeter()
	fresh := cfg
	fresh.APIOptions = append(fresh.APIOptions, meter.apiOption)
	st, err := lambdafn.Open(env, lambdafn.Options{AWS: &fresh, Logger: quiet, MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.ForStack(st, apiserver.Config{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	var events sync.Map
	device := func(i int, k *protocol.Keys) *godaemon.Daemon {
		d, err := godaemon.New(godaemon.Config{RelayURL: srv.URL, Keys: k, Backend: godaemon.EchoBackend{},
			Pairing: godaemon.Pairing{RunnerID: runnerOf(i), Owner: ownerOf(i)},
			OnEvent: func(e godaemon.Event) { events.Store(string(e.Type)+" "+runnerOf(i), e) }})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	worker := device(0, keys.devices[0])
	if _, err := worker.Tick(ctx); err != nil {
		t.Fatalf("the first tick: %v", err)
	}
	for fn, c := range meter.snapshot() {
		if fn != notFunction {
			run.first.add(c)
		}
	}

	// The device claims and finishes a job of its site.
	s, err := gosite.New(gosite.Config{RelayURL: srv.URL, SiteID: siteOf(0, sites), Keys: keys.sites[0]})
	if err != nil {
		t.Fatal(err)
	}
	stub := protocol.JobStub{ID: "scale-job", Kind: protocol.KindGenerate, Owner: ownerOf(0),
		Audience: protocol.AudiencePrivate, DeadlineAt: time.Now().Add(2 * time.Minute).UnixMilli()}
	if _, err := s.Publish(ctx, stub, protocol.GeneratePayload("hello from a large fleet")); err != nil {
		t.Fatal(err)
	}
	if claimed, err := worker.Tick(ctx); err != nil || claimed != 1 {
		t.Fatalf("claim: %d jobs, %v", claimed, err)
	}
	if rep, err := s.PumpSeals(ctx); err != nil || len(rep.Sealed) != 1 {
		t.Fatalf("seal: %+v %v", rep, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	verified := false
	for !verified && time.Now().Before(deadline) {
		rep, err := s.PumpResults(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			verified = verified || r.JobID == stub.ID
		}
		if !verified {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !verified {
		t.Fatal("no verified result for the job within 60 s")
	}

	// A device among them, revoked, is refused on its next request.
	revokedAt := n / 2
	victim := device(revokedAt, keys.devices[1])
	if _, err := victim.Tick(ctx); err != nil {
		t.Fatalf("the victim's tick before revocation: %v", err)
	}
	if _, err := controlplane.NewClient(adminSrv.URL, nil).RevokeDevice(ctx, runnerOf(revokedAt)); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Tick(ctx); !errors.Is(err, godaemon.ErrRevoked) {
		t.Fatalf("a revoked device's next tick: %v, want it refused as revoked", err)
	}
	if _, ok := events.Load(string(godaemon.EventRevoked) + " " + runnerOf(revokedAt)); !ok {
		t.Fatal("the revoked device was not told it is revoked")
	}
	return run
}

func runnerOf(i int) string      { return fmt.Sprintf("runner-%07d", i) }
func ownerOf(i int) string       { return fmt.Sprintf("owner-%07d", i) }
func siteOf(i, sites int) string { return fmt.Sprintf("site-%03d", i%sites) }

// fleetKeys are the private keys the test needs back: every site's, and
// the devices it drives (the first, and the one it revokes).
type fleetKeys struct {
	sites   []*protocol.Keys
	devices []*protocol.Keys
}

// writeFleet writes a RelayFixture of n devices over sites to path as a
// stream, each device with keys of its own (generated on every core), so
// the file is never whole in memory.
func writeFleet(t *testing.T, path string, n, sites int) fleetKeys {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var keys fleetKeys
	var kept [2]*protocol.Keys
	write := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	w.WriteString(`{"sites":[`)
	for i := range sites {
		k := mustKeys(t)
		keys.sites = append(keys.sites, k)
		if i > 0 {
			w.WriteString(",")
		}
		write(projection.SiteRecord{SiteID: siteOf(i, sites), Site: k.Public()})
	}
	w.WriteString(`],"consents":[`)
	for i := range n {
		if i > 0 {
			w.WriteString(",")
		}
		write(projection.ConsentRecord{Owner: ownerOf(i), SiteID: siteOf(i, sites)})
	}
	w.WriteString(`],"devices":[`)
	const batch = 4096
	for first := 0; first < n; first += batch {
		public := make([]protocol.PublicIdentity, min(batch, n-first))
		var wg sync.WaitGroup
		const workers = 4
		for wk := range workers {
			wg.Go(func() {
				for j := wk; j < len(public); j += workers {
					k, err := protocol.GenerateKeys()
					if err != nil {
						t.Error(err)
						return
					}
					public[j] = k.Public()
					switch first + j {
					case 0:
						kept[0] = k
					case n / 2:
						kept[1] = k
					}
				}
			})
		}
		wg.Wait()
		for j, p := range public {
			if first+j > 0 {
				w.WriteString(",")
			}
			write(projection.DeviceRecord{Owner: ownerOf(first + j), RunnerID: runnerOf(first + j), Device: p})
		}
	}
	w.WriteString(`]}`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	keys.devices = kept[:]
	return keys
}

func mustKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
