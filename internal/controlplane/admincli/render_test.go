package admincli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

// pairingStack is the admin API over memory storage with two pending
// pairings, on a clock the test holds, and the local clock the CLI tells
// a single pairing's expiry against fixed to the same instant.
type pairingStack struct {
	url          string
	laptop, ci   string // user codes
	laptopKey    string // key ids
	ciKey        string
	pairingStore *memory.Store
}

func newPairingStack(t *testing.T) *pairingStack {
	t.Helper()
	start := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	pairings := memory.New(store.Options{Clock: clk})
	admin := controlplane.NewAdmin(controlplane.AdminConfig{
		Store: controlplane.NewStore(controlplane.NewMemoryStorage()), Pairings: pairings, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(controlplane.AdminHandler(admin))
	t.Cleanup(srv.Close)

	s := &pairingStack{url: srv.URL, laptop: "AAAA-BBBB", ci: "CCCC-DDDD", pairingStore: pairings}
	put := func(code, label, platform, version string, caps []protocol.Capability, expiresIn time.Duration) string {
		k, err := protocol.GenerateKeys()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pairings.PutPairing(t.Context(), store.PendingPairing{
			DeviceCode: protocol.NewDeviceCode(), UserCode: code, Device: k.Public(), Capabilities: caps,
			Label: label, Platform: platform, DaemonVersion: version, ExpiresAt: clk.Now().Add(expiresIn).UnixMilli(),
		}); err != nil {
			t.Fatal(err)
		}
		return k.KeyID()
	}
	s.ciKey = put(s.ci, "ci-runner", "linux", "", nil, 3*time.Minute+40*time.Second)
	clk.Advance(time.Second)
	s.laptopKey = put(s.laptop, "laptop", "darwin", "0.1.1", []protocol.Capability{
		{Kind: "chat", Service: "ollama", BackendID: "b1", BackendClass: "local", Model: "llama3", OfferScope: "owner"},
		{Kind: "embed", Service: "ollama", BackendID: "b1", BackendClass: "local", OfferScope: "owner"},
	}, 9*time.Minute+59*time.Second)
	held := clk.Now()
	old := now
	now = func() time.Time { return held }
	t.Cleanup(func() { now = old })
	return s
}

func (s *pairingStack) run(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Run(t.Context(), append([]string{"--endpoint", s.url}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("byorelay admin %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// get is the API's answer to a plain GET, byte for byte.
func (s *pairingStack) get(t *testing.T, path string) []byte {
	t.Helper()
	resp, err := http.Get(s.url + controlplane.AdminPrefix + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return body
}

func TestPairingsPrintsATableWithRelativeExpiry(t *testing.T) {
	s := newPairingStack(t)
	want := "" +
		"CODE       KEY ID                                LABEL      PLATFORM  DAEMON  CAPABILITIES               EXPIRES           STATUS\n" +
		"AAAA-BBBB  " + s.laptopKey + "  laptop     darwin    0.1.1   chat:llama3, embed:ollama  expires in 9 min  pending\n" +
		"CCCC-DDDD  " + s.ciKey + "  ci-runner  linux     -       -                          expires in 3 min  pending\n" +
		"check a key id against the fingerprint its daemon printed, then: byorelay admin approve CODE --owner OWNER\n"
	if got := s.run(t, "pairings"); got != want {
		t.Fatalf("pairings printed\n%s\nwant\n%s", got, want)
	}

	// Approved, the row says so, and the single view too.
	s.run(t, "approve", s.laptop, "--owner", "alice", "--runner", "runner_laptop")
	if got := s.run(t, "pairings"); !strings.Contains(got, "approved as runner_laptop\n") {
		t.Fatalf("pairings after approve printed\n%s", got)
	}
}

func TestPairingPrintsOneFieldALine(t *testing.T) {
	s := newPairingStack(t)
	want := "" +
		"code          AAAA-BBBB\n" +
		"key id        " + s.laptopKey + "\n" +
		"label         laptop\n" +
		"platform      darwin\n" +
		"daemon        0.1.1\n" +
		"capabilities  chat:llama3, embed:ollama\n" +
		"expires       expires in 9 min\n" +
		"status        pending\n" +
		"check the key id against the fingerprint the daemon printed, then: byorelay admin approve AAAA-BBBB --owner OWNER (or deny AAAA-BBBB)\n"
	if got := s.run(t, "pairing", s.laptop); got != want {
		t.Fatalf("pairing printed\n%s\nwant\n%s", got, want)
	}
	// Past its expiry (the local clock moved on; the store still has it
	// until its sweep), the time reads as a past.
	held := now().Add(12 * time.Minute)
	now = func() time.Time { return held }
	if got := s.run(t, "pairing", s.laptop); !strings.Contains(got, "expires       expired 2 min ago\n") {
		t.Fatalf("an expired pairing printed\n%s", got)
	}
}

func TestPairingsWithNothingPendingSaysSo(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	admin := controlplane.NewAdmin(controlplane.AdminConfig{
		Store: controlplane.NewStore(controlplane.NewMemoryStorage()), Pairings: memory.New(store.Options{Clock: clk}), Clock: clk,
		Logger: slog.New(slog.DiscardHandler),
	})
	srv := httptest.NewServer(controlplane.AdminHandler(admin))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	if code := Run(t.Context(), []string{"--endpoint", srv.URL, "pairings"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "no pending pairings") {
		t.Fatalf("exit %d, printed %q %s", code, stdout.String(), stderr.String())
	}
}

// --json prints the API's answer: the same bytes once indentation is
// taken out, and the same text the CLI printed before it had tables
// (the decoded answer re-encoded with two-space indentation).
func TestJSONPrintsTheAPIsAnswerUnchanged(t *testing.T) {
	s := newPairingStack(t)
	for _, tc := range []struct {
		args    []string
		path    string
		decoded any
	}{
		{[]string{"pairings", "--json"}, "/pairings/pending", &controlplane.PendingPairingsResponse{}},
		{[]string{"--json", "pairing", s.laptop}, "/pairings/" + s.laptop, &controlplane.Pairing{}},
	} {
		t.Run(tc.args[0]+tc.args[1], func(t *testing.T) {
			got := s.run(t, tc.args...)
			api := s.get(t, tc.path)
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(got)); err != nil {
				t.Fatalf("--json printed no JSON: %v\n%s", err, got)
			}
			if compact.String()+"\n" != string(api) {
				t.Fatalf("--json printed\n%s\nthe API answered\n%s", compact.String(), api)
			}
			if err := json.Unmarshal(api, tc.decoded); err != nil {
				t.Fatal(err)
			}
			before, err := json.MarshalIndent(tc.decoded, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if got != string(before)+"\n" {
				t.Fatalf("--json printed\n%s\nthe CLI printed before\n%s", got, before)
			}
		})
	}
}
