package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
)

// TestMain stops the DynamoDB Local the serve tests start.
func TestMain(m *testing.M) { localtest.Main(m) }

func TestRunDispatchesAndRefusesMisuse(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, 2},
		{"an unknown command", []string{"launch"}, 2},
		{"help", []string{"help"}, 0},
		{"admin, which is byorelay's", []string{"admin", "export"}, 2},
		{"serve help", []string{"serve", "-h"}, 0},
		{"serve with an unknown flag", []string{"serve", "--bogus"}, 2},
		{"serve with an argument", []string{"serve", "now"}, 2},
		{"serve with no sweep interval", []string{"serve", "--sweep-every=0s"}, 2},
		{"serve with no lease", []string{"serve", "--lease=0s"}, 2},
		{"serve with no awaiting window", []string{"serve", "--awaiting=0s"}, 2},
		{"serve on every interface without saying the admin API goes too", []string{"serve", "--host", "0.0.0.0"}, 2},
		{"serve on a LAN address without saying the admin API goes too", []string{"serve", "--host", "192.168.1.20"}, 2},
		{"serve on a store it does not know", []string{"serve", "--store", "sqlite"}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := run(context.Background(), c.args, &out, &errOut); got != c.want {
				t.Fatalf("exit %d, want %d; stderr %s", got, c.want, errOut.String())
			}
		})
	}
}

func TestServeBringsUpTheStackWithTheDemoWorld(t *testing.T) {
	for _, store := range []string{storeDynamo, storeMemory} {
		t.Run(store, func(t *testing.T) {
			opts := testServeOptions(t)
			opts.store = store
			serveBringsUpTheDemoWorld(t, opts)
		})
	}
}

func serveBringsUpTheDemoWorld(t *testing.T, opts serveOptions) {
	ctx := context.Background()
	ls, err := startLocal(ctx, opts, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.close) // close is idempotent; the test closes it early too
	if !ls.imported {
		t.Fatal("a new table did not get the demo projection")
	}

	var banner bytes.Buffer
	ls.printBanner(&banner)
	for _, want := range []string{
		"relay          " + ls.url,
		ls.url + "/byollm/",
		ls.url + "/relay/site/",
		"admin API      " + ls.url + "/admin",
		"site id        " + demo.SiteID,
		"site key id    " + ls.demo.Site.KeyID(),
		"byollm connect " + ls.url,
		"admin approve XXXX-XXXX --owner " + demo.Owner,
		"BYORELAY_ADMIN_URL=" + ls.url + "/admin",
		"BYORELAY_ADMIN_TOKEN=" + ls.adminToken,
		"admin console  " + ls.url + "/admin/pairings#token=" + ls.adminToken,
		opts.demoDir,
		map[string]string{storeDynamo: "DynamoDB       " + opts.ddbEndpoint, storeMemory: "store          memory"}[opts.store],
	} {
		if !strings.Contains(banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, banner.String())
		}
	}

	// The demo world works over HTTP: the demo site enqueues, the demo
	// device claims it.
	site := &relaytest.Site{Keys: ls.demo.Site, SiteID: demo.SiteID}
	daemon := &relaytest.Daemon{Keys: ls.demo.Daemon, RunnerID: demo.RunnerID, Owner: demo.Owner}
	code, body := send(t, ls.url, site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: demo.SiteID,
		Stub: site.Stub("demo-job", demo.Owner, time.Now().Add(time.Hour).UnixMilli()),
	}))
	if code != 200 || string(body) != `{"jobId":"demo-job","state":"queued"}` {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	code, body = send(t, ls.url, daemon.Request(t, "claim", time.Now(), protocol.ClaimRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: demo.RunnerID, Max: 1,
		Capabilities: []protocol.Capability{{Kind: "llm.generate", Service: "local", BackendID: "ollama",
			BackendClass: "http", Model: "llama3.2", OfferScope: "private"}},
	}))
	var claim protocol.ClaimResponse
	if err := json.Unmarshal(body, &claim); code != 200 || err != nil || len(claim.Jobs) != 1 || claim.Jobs[0].ID != "demo-job" {
		t.Fatalf("claim: %d %s", code, body)
	}

	// The admin API is served on the same port, to the token only.
	adminGet := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ls.url+"/admin/fixture", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := adminGet(""); code != http.StatusUnauthorized {
		t.Fatalf("admin fixture without the token: %d %s", code, body)
	}
	if code, body := adminGet("not-the-token"); code != http.StatusUnauthorized {
		t.Fatalf("admin fixture with a wrong token: %d %s", code, body)
	}
	if code, body := adminGet(ls.adminToken); code != 200 || !strings.Contains(body, `"siteId":"demo-site"`) {
		t.Fatalf("admin fixture: %d %s", code, body)
	}

	// The env file the demo and the admin CLI read names this stack.
	env, found, err := localstack.Read(opts.demoDir)
	if err != nil || !found || env.URL != ls.url || env.AdminToken != ls.adminToken {
		t.Fatalf("stack.env: %+v %v %v", env, found, err)
	}
	if info, err := os.Stat(filepath.Join(opts.demoDir, localstack.StackFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("stack.env must be owner-only: %v %v", info, err)
	}
	ls.close()
	if _, found, _ := localstack.Read(opts.demoDir); found {
		t.Fatal("a stopped stack left its env file for the demo to find")
	}
}

func TestUsableURLsNeverNameTheUnspecifiedAddress(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   string
	}{
		{"0.0.0.0", "http://127.0.0.1:8787"},
		{"::", "http://127.0.0.1:8787"},
		{"127.0.0.1", "http://127.0.0.1:8787"},
		{"::1", "http://[::1]:8787"},
		{"192.168.1.20", "http://192.168.1.20:8787"},
	} {
		got, hosts := usableURL(&net.TCPAddr{IP: net.ParseIP(tc.listen), Port: 8787})
		if got != tc.want || len(hosts) == 0 {
			t.Errorf("listening on %s: %s %v, want %s", tc.listen, got, hosts, tc.want)
		}
	}
}

func TestServeKeepsTheDemoKeysSecretAndReusesThem(t *testing.T) {
	ctx := context.Background()
	opts := testServeOptions(t)
	first, err := startLocal(ctx, opts, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	keyID := first.demo.Site.KeyID()
	first.close()

	for _, name := range []string{"site-keys.json", "device-keys.json", "site.env"} {
		info, err := os.Stat(filepath.Join(opts.demoDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want owner-only", name, info.Mode().Perm())
		}
	}
	// site.env holds the site keys in the form @byollm/server reads.
	env, err := os.ReadFile(filepath.Join(opts.demoDir, "site.env"))
	if err != nil {
		t.Fatal(err)
	}
	var encoded string
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "BYOLLM_SITE_KEYS="); ok {
			encoded = v
		}
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		t.Fatalf("BYOLLM_SITE_KEYS: %v", err)
	}
	var stored protocol.StoredKeys
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	keys, err := stored.Keys()
	if err != nil || keys.KeyID() != keyID {
		t.Fatalf("BYOLLM_SITE_KEYS holds %v (%v), want the demo site %s", keys, err, keyID)
	}

	// A restart over the same table and directory keeps both: a daemon
	// paired on the first run still knows the site, and its approval stands.
	second, err := startLocal(ctx, opts, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer second.close()
	if second.demo.Site.KeyID() != keyID {
		t.Fatalf("site key changed across runs: %s then %s", keyID, second.demo.Site.KeyID())
	}
	if second.imported {
		t.Fatal("the projection was re-imported over the one already in the table")
	}
}

func TestServeRunsUntilCancelled(t *testing.T) {
	opts := testServeOptions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := runServe(ctx, []string{
			"--port=0", "--ddb-endpoint=" + opts.ddbEndpoint, "--table=" + opts.table,
			"--demo-dir=" + opts.demoDir, "--quiet",
		}, outW, io.Discard)
		outW.Close()
		done <- code
	}()

	var url string
	lines := bufio.NewScanner(outR)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "relay"); ok && url == "" {
			url = strings.TrimSpace(v)
		}
		if strings.HasPrefix(lines.Text(), "Ctrl-C") {
			break
		}
	}
	if url == "" {
		t.Fatal("no relay URL in the banner")
	}
	// An unknown path outside both planes reaches the catch-all function.
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || string(body) != `{"error":"not-found"}` {
		t.Fatalf("GET /healthz: %d %s", resp.StatusCode, body)
	}

	cancel()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel", code)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("still serving after cancel")
	}
}

func TestServeFlagsSetLeaseAwaitingWindowAndSweepPeriod(t *testing.T) {
	o, err := parseServeFlags([]string{"--lease=5s", "--awaiting=1500ms", "--sweep-every=2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.lease != 5*time.Second || o.awaiting != 1500*time.Millisecond || o.sweepEvery != 2*time.Second {
		t.Fatalf("options = %+v", o)
	}
	if o, _ := parseServeFlags(nil, io.Discard); o.lease != time.Minute || o.awaiting != 10*time.Second {
		t.Fatalf("defaults = %+v, want the reference's 60 s lease and 10 s window", o)
	}
}

// testServeOptions points serve at the tests' DynamoDB Local, a fresh
// table, a free port and a temporary demo directory.
func testServeOptions(t *testing.T) serveOptions {
	t.Helper()
	return serveOptions{
		store:       storeDynamo,
		host:        "127.0.0.1",
		port:        0,
		ddbEndpoint: localtest.DynamoEndpoint(t),
		table:       localtest.UniqueName("serve"),
		demoDir:     filepath.Join(t.TempDir(), "demo"),
		sweepEvery:  time.Hour,
	}
}

func send(t *testing.T, base string, r relay.Request) (int, []byte) {
	t.Helper()
	url := base + r.Path
	if r.RawQuery != "" {
		url += "?" + r.RawQuery
	}
	req, err := http.NewRequest(r.Method, url, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestServeFailsBeforeTheBannerWhenThePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	opts := testServeOptions(t)
	opts.port = taken.Addr().(*net.TCPAddr).Port
	var out, errOut bytes.Buffer
	// No --ddb-endpoint: the port is checked before DynamoDB Local would
	// start (and before anything says it is starting).
	code := runServe(context.Background(), []string{
		"--port=" + strconv.Itoa(opts.port), "--table=" + opts.table, "--demo-dir=" + opts.demoDir,
	}, &out, &errOut)
	if code != 1 || strings.Contains(out.String(), "relay ") || strings.Contains(out.String(), "DynamoDB") ||
		!strings.Contains(errOut.String(), "address already in use") || !strings.Contains(errOut.String(), "--port") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errOut.String())
	}
}

func TestServeFlagsSetTheSiteCopyCount(t *testing.T) {
	if o, err := parseServeFlags([]string{"--site-copies=32"}, io.Discard); err != nil || o.siteCopies != 32 {
		t.Fatalf("options = %+v, %v", o, err)
	}
	if o, _ := parseServeFlags(nil, io.Discard); o.siteCopies != controlplane.DefaultSiteCopies {
		t.Fatalf("default site copies %d, want %d", o.siteCopies, controlplane.DefaultSiteCopies)
	}
	for _, bad := range []string{"--site-copies=0", "--site-copies=5000"} {
		if _, err := parseServeFlags([]string{bad}, io.Discard); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
