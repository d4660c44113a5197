package relay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func TestDebugPage(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("off by default: both paths are a bare 404 on any verb", func(t *testing.T) {
			w := newWorld(t, f)
			for _, path := range []string{"/debug", "/byollm/debug"} {
				for _, method := range []string{"GET", "POST"} {
					expect(t, w.do(get(method, path, "site=site-a", nil)), 404, `{"error":"not-found"}`)
				}
			}
		})
		t.Run("on: a missing or unknown site is the same bare 400", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.Debug = true })
			for _, query := range []string{"", "site=", "site=site-z"} {
				expect(t, w.do(get("GET", "/debug", query, nil)), 400, `{"error":"bad-request"}`)
			}
		})
		t.Run("on: the page shows one site's jobs and no other tenant's", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.Debug = true })
			other := relaytest.NewSite(t, "site-b")
			bob := relaytest.NewDaemon(t, "runner-bob", "bob")
			w.project(w.base().Site(other).Device(bob).Consent("alice", "site-a").Consent("bob", "site-b"))
			w.enqueue(w.site, "job-mine", "alice")
			w.enqueue(other, "job-theirs", "bob")
			w.claim(w.daemon, 1)
			w.claim(bob, 1)
			resp := w.do(get("GET", "/byollm/debug", "site=site-a", nil))
			if resp.Status != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
				t.Fatalf("got %d %s", resp.Status, resp.Header)
			}
			page := string(resp.Body)
			for _, want := range []string{"job-mine", "awaiting-payload", "10000ms left", w.daemon.Keys.KeyID(), "runner-1", `<meta http-equiv="refresh" content="1">`} {
				if !strings.Contains(page, want) {
					t.Errorf("page lacks %q", want)
				}
			}
			for _, leak := range []string{"job-theirs", "runner-bob", bob.Keys.KeyID()} {
				if strings.Contains(page, leak) {
					t.Errorf("page shows another tenant's %q", leak)
				}
			}
		})
		t.Run("names are escaped", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.Debug = true })
			w.enqueue(w.site, "<script>x&", "alice")
			page := string(w.do(get("GET", "/debug", "site=site-a", nil)).Body)
			if strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;x&amp;") {
				t.Fatal("the job id was not escaped")
			}
		})
	})
}

// logRecord is one JSON log line.
type logRecord map[string]any

func records(t *testing.T, w *world) []logRecord {
	t.Helper()
	var out []logRecord
	for _, line := range strings.Split(strings.TrimSpace(w.logs.String()), "\n") {
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func TestLogs(t *testing.T) {
	w := newWorld(t, factories[0])
	w.enqueue(w.site, "job-1", "alice")
	req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
	req.Header.Set("X-Request-Id", "req-from-header")
	w.do(req)
	w.relay.Handle(relay.WithRequestID(w.ctx, "req-from-ctx"), (w.daemon.Request(t, "heartbeat", w.now(), heartbeatBody(w.daemon))))

	var sawGrant, sawHeader, sawCtx bool
	for _, r := range records(t, w) {
		if r["requestId"] == "req-from-header" {
			sawHeader = true
		}
		if r["requestId"] == "req-from-ctx" {
			sawCtx = true
		}
		if r["decision"] == "grant-lease" && r["runner"] == "runner-1" && r["job"] == "job-1" {
			sawGrant = true
		}
	}
	if !sawGrant || !sawHeader || !sawCtx {
		t.Fatalf("grant %v header %v ctx %v\n%s", sawGrant, sawHeader, sawCtx, w.logs)
	}
	w.noSecretsLogged(req.Header.Get(protocol.HeaderSignature), w.site.Public().Identity, w.daemon.Public().Identity, w.daemon.Public().Encryption)
}

type countingMetrics struct {
	relay.NopMetrics
	claimed, refused, requeued, removed int
	codes                               []string
}

func (m *countingMetrics) Claimed(n int) { m.claimed += n }
func (m *countingMetrics) Refused(_, code string) {
	m.refused++
	m.codes = append(m.codes, code)
}
func (m *countingMetrics) Swept(requeued, removed int) { m.requeued += requeued; m.removed += removed }

func TestMetricsAndSweep(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		m := &countingMetrics{}
		w := newWorld(t, f, func(c *relay.Config) { c.Metrics = m })
		w.enqueue(w.site, "job-1", "alice")
		w.enqueue(w.site, "job-2", "alice")
		w.claim(w.daemon, 1)
		w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, protocol.GrantRef{JobID: "job-1", LeaseID: "x"}))
		w.advance(10_000)
		res, err := w.relay.Sweep(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Requeued) != 1 || res.Requeued[0].ID != "job-1" || res.Requeued[0].State != store.StateQueued {
			t.Fatalf("sweep %+v", res)
		}
		w.advance(3_600_000)
		res, err = w.relay.Sweep(w.ctx)
		if err != nil || len(res.Removed) != 2 {
			t.Fatalf("sweep %+v %v", res, err)
		}
		if m.claimed != 1 || m.refused != 1 || m.codes[0] != "forbidden" || m.requeued != 1 || m.removed != 2 {
			t.Fatalf("metrics %+v", m)
		}
	})
}

func TestChurnReporter(t *testing.T) {
	var got []store.UnsealedChurn
	m := &churnMetrics{got: &got}
	report := relay.ChurnReporter(nil, m)
	report(store.UnsealedChurn{SiteID: "s", Owner: "o", Expiries: 6, WindowMs: 300_000})
	if len(got) != 1 || got[0].SiteID != "s" {
		t.Fatalf("got %+v", got)
	}
}

type churnMetrics struct {
	relay.NopMetrics
	got *[]store.UnsealedChurn
}

func (m *churnMetrics) Churn(c store.UnsealedChurn) { *m.got = append(*m.got, c) }
