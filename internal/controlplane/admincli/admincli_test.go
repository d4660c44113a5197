package admincli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

type stack struct {
	url      string
	store    *controlplane.Store
	pairings *memory.Store
	clock    *clock.Manual
}

// newStack serves the admin API over memory storage on loopback, as the
// local stack does.
func newStack(t *testing.T) *stack {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	pairings := memory.New(store.Options{Clock: clk})
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{
		Store: s, Pairings: pairings, Presence: pairings, Queue: pairings, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(controlplane.AdminHandler(admin))
	t.Cleanup(srv.Close)
	return &stack{url: srv.URL, store: s, pairings: pairings, clock: clk}
}

// run runs the CLI against the stack and returns exit code and output.
func (s *stack) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := admincli.Run(t.Context(), append([]string{"--endpoint", s.url}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func (s *stack) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := s.run(t, args...)
	if code != 0 {
		t.Fatalf("byorelay admin %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func (s *stack) projection(t *testing.T) *projection.Projection {
	t.Helper()
	p, err := s.store.Projection(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func keys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTheCLIDrivesTheAdminAPI(t *testing.T) {
	s := newStack(t)
	k1, k2, device := keys(t), keys(t), keys(t)

	s.mustRun(t, "site", "add", "site-a", writeJSON(t, k1.Public()))
	link, _ := protocol.SignSuccession(k1, k2.Public())
	s.mustRun(t, "site", "rotate", "site-a", writeJSON(t, controlplane.RotateSiteRequest{Site: k2.Public(), Succession: link}))
	s.mustRun(t, "consent", "add", "--owner", "alice", "--site", "site-a")
	if out := s.mustRun(t, "consent", "pause", "--owner=alice", "--site=site-a"); !strings.HasPrefix(out, "consent owner alice, site site-a: paused") {
		t.Fatalf("consent pause printed %q", out)
	}
	if s.projection(t).MayRouteFor("alice", "site-a") {
		t.Fatal("paused consent still routes")
	}
	s.mustRun(t, "consent", "resume", "--owner", "alice", "--site", "site-a")

	code := protocol.NewUserCode()
	if _, err := s.pairings.PutPairing(t.Context(), store.PendingPairing{
		DeviceCode: protocol.NewDeviceCode(), UserCode: code, Device: device.Public(),
		Label: "laptop", Platform: "darwin", ExpiresAt: s.clock.Now().UnixMilli() + store.PairingCodeTTLMs,
	}); err != nil {
		t.Fatal(err)
	}
	var listed controlplane.PendingPairingsResponse
	if err := json.Unmarshal([]byte(s.mustRun(t, "pairings", "--json")), &listed); err != nil || len(listed.Pairings) != 1 ||
		listed.Pairings[0].UserCode != code || listed.Pairings[0].Fingerprint != device.KeyID() {
		t.Fatalf("pairings lists %+v (%v), want the one pending", listed, err)
	}
	if code, _, _ := s.run(t, "pairings", "extra"); code != 2 {
		t.Fatalf("pairings with an argument: exit %d, want 2", code)
	}
	if out := s.mustRun(t, "pairing", code); !strings.Contains(out, device.KeyID()) {
		t.Fatalf("pairing does not show the fingerprint: %s", out)
	}
	// Flags after the positional, as a person types them.
	out := s.mustRun(t, "approve", code, "--owner", "alice", "--runner", "runner_laptop", "--json")
	var approved controlplane.DeviceResponse
	if err := json.Unmarshal([]byte(out), &approved); err != nil || approved.Device.RunnerID != "runner_laptop" {
		t.Fatalf("approve printed %s (%v)", out, err)
	}
	if out := s.mustRun(t, "roster", "set", "team", "--owner", "alice", "--members", "bob,carol"); !strings.HasPrefix(out, "roster team: owner alice, members bob, carol;") {
		t.Fatalf("roster set printed %q", out)
	}
	if got := s.projection(t).OwnersRunnableBy("alice"); strings.Join(got, ",") != "alice,bob,carol" {
		t.Fatalf("owners %v", got)
	}
	s.mustRun(t, "roster", "delete", "team")
	if out := s.mustRun(t, "revoke-device", "runner_laptop"); !strings.HasPrefix(out, "revoked device runner_laptop") || !strings.Contains(out, device.KeyID()) {
		t.Fatalf("revoke-device printed %q", out)
	}

	p := s.projection(t)
	if !p.RevokedDevice("runner_laptop") || !p.MayRouteFor("alice", "site-a") {
		t.Fatal("the projection does not show the CLI's changes")
	}
	if id, _ := p.SiteIDForKey(k2.KeyID()); id != "site-a" {
		t.Fatal("rotation did not land")
	}

	// export | import round-trips.
	exported := s.mustRun(t, "export")
	path := filepath.Join(t.TempDir(), "fixture.json")
	if err := os.WriteFile(path, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, "import", path)
	if again := s.mustRun(t, "export"); again != exported {
		t.Fatalf("export after import differs:\n%s\n%s", exported, again)
	}
}

func TestTheCLIReportsRefusalsAndMisuse(t *testing.T) {
	s := newStack(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"an API refusal", []string{"revoke-device", "runner_nobody"}, 1, "runner_nobody"},
		{"approve without owner", []string{"approve", "ABCD-EFGH"}, 2, "--owner"},
		{"an unknown consent action", []string{"consent", "destroy", "--owner", "a", "--site", "s"}, 2, "usage"},
		{"an unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"a flag the command does not take", []string{"export", "--owner", "a"}, 2, "owner"},
		{"a missing file", []string{"import", "/nonexistent/fixture.json"}, 1, "fixture.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := s.run(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, errOut, tc.code, tc.says)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	t.Setenv(admincli.EnvEndpoint, "")
	if code := admincli.Run(t.Context(), []string{"export"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), admincli.EnvEndpoint) {
		t.Fatalf("no endpoint: exit %d, %q", code, stderr.String())
	}
}

func TestTheEndpointComesFromTheEnvironment(t *testing.T) {
	s := newStack(t)
	t.Setenv(admincli.EnvEndpoint, s.url)
	var stdout, stderr bytes.Buffer
	if code := admincli.Run(t.Context(), []string{"export"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"consents"`) {
		t.Fatalf("export printed %q", stdout.String())
	}
}

func TestRequestsToADeploymentAreSignedWithSigV4(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"version":3,"consent":{"owner":"a","siteId":"s","paused":true,"revoked":false}}`))
	}))
	defer srv.Close()
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "session")
	client := controlplane.NewClient(srv.URL, &http.Client{Transport: admincli.NewSigV4Transport(nil, creds, "eu-west-1")})
	res, err := client.Consent(t.Context(), controlplane.ConsentPause, controlplane.ConsentRequest{Owner: "a", SiteID: "s"})
	if err != nil || res.Version != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	r := seen[0]
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(auth, "/eu-west-1/execute-api/aws4_request") {
		t.Fatalf("Authorization %q", auth)
	}
	if r.Header.Get("X-Amz-Date") == "" || r.Header.Get("X-Amz-Security-Token") != "session" {
		t.Fatalf("headers %v", r.Header)
	}
}

func TestTheCLIMapsAndUnmapsSlotsAndSetsASitesPurposes(t *testing.T) {
	s := newStack(t)
	s.mustRun(t, "site", "add", "shop", writeJSON(t, keys(t).Public()))
	s.mustRun(t, "consent", "add", "--owner", "alice", "--site", "shop")
	s.mustRun(t, "consent", "add", "--owner", "bob", "--site", "shop")
	s.mustRun(t, "roster", "set", "team", "--owner", "alice", "--members", "bob")

	out := s.mustRun(t, "map", "--owner", "bob", "--site", "shop", "--kind", "llm.chat", "--service", "qwen", "--service-owner", "alice")
	if !strings.Contains(out, "purpose default, kind llm.chat -> service qwen of alice") {
		t.Fatalf("map printed %q", out)
	}
	s.mustRun(t, "map", "--owner", "bob", "--site", "shop", "--kind", "llm.chat", "--purpose", "summarise", "--service", "small")
	m, ok := s.projection(t).MappingFor("bob", "shop", "summarise", "llm.chat")
	if !ok || m.Service != "small" || m.ServiceOwner != "" {
		t.Fatalf("mapping %+v %v", m, ok)
	}
	s.mustRun(t, "unmap", "--owner", "bob", "--site", "shop", "--kind", "llm.chat", "--purpose", "summarise")
	if _, ok := s.projection(t).MappingFor("bob", "shop", "summarise", "llm.chat"); ok {
		t.Fatal("unmap left the mapping")
	}
	// alice is not on bob's team: refused by the API, exit 1.
	if code, _, errOut := s.run(t, "map", "--owner", "alice", "--site", "shop", "--kind", "llm.chat", "--service", "qwen", "--service-owner", "bob"); code != 1 || !strings.Contains(errOut, "no roster") {
		t.Fatalf("a mapping to a stranger's service: exit %d, %q", code, errOut)
	}
	if code, _, _ := s.run(t, "map", "--owner", "alice", "--site", "shop"); code != 2 {
		t.Fatalf("map without kind and service: exit %d, want 2", code)
	}

	if out := s.mustRun(t, "site", "purposes", "shop", "--purposes", "summarise,default"); !strings.Contains(out, "declares summarise, default") {
		t.Fatalf("site purposes printed %q", out)
	}
	if p := s.projection(t); !p.Declares("shop", "summarise") || p.Declares("shop", "translate") {
		t.Fatal("the purposes were not set")
	}
	if out := s.mustRun(t, "site", "purposes", "shop"); !strings.Contains(out, "declares every purpose") {
		t.Fatalf("clearing the purposes printed %q", out)
	}
}

func TestTheCLIShowsAPersonAndMapsUniqueSlots(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	site, device := keys(t), keys(t)
	s.mustRun(t, "site", "add", "shop", writeJSON(t, site.Public()))
	s.mustRun(t, "consent", "add", "--owner", "alice", "--site", "shop")
	code := protocol.NewUserCode()
	if _, err := s.pairings.PutPairing(ctx, store.PendingPairing{
		DeviceCode: protocol.NewDeviceCode(), UserCode: code, Device: device.Public(),
		Label: "laptop", Platform: "linux", ExpiresAt: s.clock.Now().UnixMilli() + store.PairingCodeTTLMs,
	}); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, "approve", code, "--owner", "alice", "--runner", "r-alice")
	if _, err := s.pairings.Seen(ctx, store.Sighting{RunnerID: "r-alice", Owner: "alice", Device: device.Public(),
		Capabilities: []protocol.Capability{{Kind: "llm.chat", Service: "qwen", OfferScope: "private"}}}); err != nil {
		t.Fatal(err)
	}
	stub := protocol.JobStub{ID: "job-1", Kind: "llm.chat", Owner: "alice", Site: site.KeyID(), Audience: "team", DeadlineAt: s.clock.Now().Add(time.Hour).UnixMilli()}
	if _, err := s.pairings.Enqueue(ctx, store.EnqueueInput{ID: stub.ID, SiteID: "shop", Stub: stub}); err != nil {
		t.Fatal(err)
	}
	if out := s.mustRun(t, "person", "alice"); !strings.Contains(out, "waiting, unmapped: job job-1 (purpose default, kind llm.chat); could answer it: qwen of alice") {
		t.Fatalf("person printed %q", out)
	}
	if out := s.mustRun(t, "map-unique", "--dry-run"); !strings.Contains(out, "would map: alice at shop, purpose default, kind llm.chat -> service qwen") ||
		!strings.Contains(out, "left: alice at shop, purpose default, kind llm.generate") {
		t.Fatalf("map-unique --dry-run printed %q", out)
	}
	if _, ok := s.projection(t).MappingFor("alice", "shop", "default", "llm.chat"); ok {
		t.Fatal("a dry run mapped")
	}
	s.mustRun(t, "map-unique")
	if m, ok := s.projection(t).MappingFor("alice", "shop", "default", "llm.chat"); !ok || m.Service != "qwen" {
		t.Fatalf("map-unique mapped %+v %v", m, ok)
	}
	if out := s.mustRun(t, "person", "alice"); strings.Contains(out, "waiting") {
		t.Fatalf("after map-unique the job still waits: %q", out)
	}
}
