package siteconformance

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/protocol"
)

// Timing for the kit. advanceTime removes the deliberate waits, so these
// only have to outlive a check's real steps: the kit's C009 holds a job for up to 10 s of real time while a cancel travels.
const (
	leaseMs = 30_000
	ttlMs   = 5_000
)

// certify runs byollm-certify against a server already listening and
// fails the test unless all 32 checks pass. It returns the kit's report.
func certify(t *testing.T, name, origin, admin string) string {
	t.Helper()
	node, modules := localtest.RequireNode(t, "@byollm/conformance")
	target, err := filepath.Abs("target.mjs")
	if err != nil {
		t.Fatal(err)
	}
	run := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, filepath.Join(modules, "@byollm/conformance/dist/cli.js"), target)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(),
			"BYORELAY_SITE_ORIGIN="+origin,
			"BYORELAY_SITE_ADMIN="+admin,
			"BYORELAY_SITE_NAME="+name,
			"BYORELAY_SITE_LEASE_MS="+strconv.Itoa(leaseMs),
			"BYORELAY_SITE_TTL_MS="+strconv.Itoa(ttlMs),
		)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	report, err := run()
	if err != nil && onlyKitTimingFailed(report) {
		t.Logf("byollm-certify against %s failed only the kit's own fixed pause; run again:\n%s", name, report)
		report, err = run()
	}
	if err != nil || !strings.Contains(report, "32 checks passed") {
		t.Fatalf("byollm-certify against %s: %v\n%s", name, err, report)
	}
	t.Logf("byollm-certify against %s:\n%s", name, report)
	return report
}

// kitTimingFailures are the kit's failures that rest on a fixed pause of
// its own rather than on anything the server decides: C003 sleeps 50 ms
// between its daemon's claim tick and looking for the backend call, which
// its daemon makes only after fetching and opening the payload, and a
// machine under heavy load can take longer. A run whose every failure is
// one of these, in these words, is run once more (both reports are
// logged); any other failure fails the test at once.
var kitTimingFailures = map[string]string{
	"C003_UNKNOWN_KIND_REFUSED": "the advertised kind never reached the backend",
}

// onlyKitTimingFailed reports whether the kit's report names at least one
// failed check and every failed check is in kitTimingFailures with its
// words.
func onlyKitTimingFailed(report string) bool {
	lines := strings.Split(report, "\n")
	failed := 0
	for i, line := range lines {
		id, ok := strings.CutPrefix(strings.TrimSpace(line), "✗ ")
		if !ok {
			continue
		}
		id, _, _ = strings.Cut(id, " ")
		words, known := kitTimingFailures[id]
		if !known || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != words {
			return false
		}
		failed++
	}
	return failed > 0
}

// newSiteKeys makes this test's own site keys.
func newSiteKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCertifyPasses32of32OnTheMemoryStore(t *testing.T) {
	clock := sitestore.NewOffsetClock(nil)
	st := memory.New(memory.Options{Clock: clock})
	srv, err := siteserver.New(siteserver.Config{
		Store:           st,
		Keys:            newSiteKeys(t),
		VerificationURL: "http://127.0.0.1/pair",
		LeaseMs:         leaseMs,
	})
	if err != nil {
		t.Fatal(err)
	}
	daemonPlane := httptest.NewServer(srv)
	defer daemonPlane.Close()
	admin := httptest.NewServer(siteserver.NewAdmin(srv, st, clock))
	defer admin.Close()
	certify(t, "byorelay siteserver (memory store)", daemonPlane.URL, admin.URL)
}

func TestMain(m *testing.M) { localtest.Main(m) }

// TestCertifyPasses32of32ThroughTheLocalAPIServer is the
// deployed shape run locally: the site functions' handlers (sitefn) over a
// DynamoDB Local table, routed by the local API server from
// site-template.yaml as API Gateway would, the kit's daemons speaking HTTP
// to it. The admin listener is a second loopback server over the same
// store and clock.
func TestCertifyPasses32of32ThroughTheLocalAPIServer(t *testing.T) {
	ctx := context.Background()
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("site")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	clock := sitestore.NewOffsetClock(nil)
	st, err := sitefn.Open(sitefn.Env{TableName: table, VerificationURL: "http://127.0.0.1/pair", LeaseMs: leaseMs},
		sitefn.Options{DB: db, Keys: newSiteKeys(t), Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.ForSiteStack(st, apiserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gateway := httptest.NewServer(api)
	defer gateway.Close()
	srv, err := st.Server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(siteserver.NewAdmin(srv, st.Store, clock))
	defer admin.Close()
	certify(t, "byorelay site functions (DynamoDB Local, local API server)", gateway.URL, admin.URL)
}
