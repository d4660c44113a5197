package sitepump

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/apiserver"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// sealClock records when the relay accepted each job's payload.
type sealClock struct {
	base http.RoundTripper
	mu   sync.Mutex
	at   map[string]time.Time
}

func (c *sealClock) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/payload") {
		return c.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := c.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		var in struct {
			JobID string `json:"jobId"`
		}
		_ = json.Unmarshal(body, &in)
		c.mu.Lock()
		if _, seen := c.at[in.JobID]; !seen {
			c.at[in.JobID] = time.Now()
		}
		c.mu.Unlock()
	}
	return resp, err
}

func (c *sealClock) sealed(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[id]
	return at, ok
}

// TestEnqueueToSealedFunctionsBesideRun measures, in one run against one
// relay and one Go daemon, the time from a site's enqueue to the relay
// accepting the payload sealed to the claiming device: on the
// functions-only cloud lane (the app function behind the local API
// server, pump invocations started by its enqueue, each on a goroutine,
// InProcess) and on siteserver.Server.Run as a process, both at the
// deployed cadence (sitepump.DefaultEvery). Jobs are enqueued one at a
// time, 3 s after the previous one was sealed: a pump that saw the site
// idle at a cycle has stopped by then and the next job pays a pump start;
// one that had not yet collected the previous result is still running.
// It prints p50 and p99 of each, every sample, and each pump invocation
// that pumped (docs/performance.md).
func TestEnqueueToSealedFunctionsBesideRun(t *testing.T) {
	if os.Getenv(envLatency) == "" {
		t.Skip("a measurement of a few minutes: `make site-pump` runs it (" + envLatency + "=1)")
	}
	ctx := context.Background()
	const jobs = 20
	br := peers.StartByorelayEnv(t, relayEnv())
	w := &peers.World{Origin: br.Origin, Admin: controlplane.NewClient(br.Origin, nil)}
	lanes := []string{"functions", "siteserver.Run"}
	keys := map[string]*protocol.Keys{}
	for _, lane := range lanes {
		k, err := peers.SiteKeys(rand.Text())
		if err != nil {
			t.Fatal(err)
		}
		keys[lane] = k
		id := laneSite(lane)
		if _, err := w.Admin.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: id, Site: k.Public()}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: jobOwner, SiteID: id}); err != nil {
			t.Fatal(err)
		}
	}
	w.Site = &relaytest.Site{Keys: keys[lanes[0]], SiteID: laneSite(lanes[0])}
	w.RunGoDaemon(t, daemon.Config{Backend: daemon.EchoBackend{}, Concurrency: 4}, "latency")

	db := localtest.DynamoClient(t)
	results := map[string][]time.Duration{}
	for _, lane := range lanes {
		table := localtest.UniqueName("sitepump-latency")
		if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
			t.Fatal(err)
		}
		rec := &sealClock{base: http.DefaultTransport, at: map[string]time.Time{}}
		relayHTTP := &http.Client{Transport: rec, Timeout: 30 * time.Second}
		var enqueue func(id, body string)
		switch lane {
		case "functions":
			pumps := &InProcess{Returned: func(ev sitepump.Event, rep sitepump.Report, err error) {
				t.Logf("%s pump (%s): %+v %v", time.Now().Format("15:04:05.000"), ev.Trigger, rep, err)
			}}
			st, err := sitefn.Open(sitefn.Env{TableName: table, RelayURL: br.Origin, SiteID: laneSite(lane)},
				sitefn.Options{DB: db, Keys: keys[lane], Logger: slog.New(slog.DiscardHandler), Starter: pumps, Waker: pumps, RelayHTTP: relayHTTP})
			if err != nil {
				t.Fatal(err)
			}
			if pumps.Handle, err = st.PumpHandler(); err != nil {
				t.Fatal(err)
			}
			api, err := apiserver.ForSiteStack(st, apiserver.Config{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			enqueue = func(id, body string) {
				if code, resp := postJSON(t, srv.URL+"/app/enqueue", body); code != http.StatusOK {
					t.Fatalf("enqueue %s: %d %s", id, code, resp)
				}
			}
		default:
			store, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			s, err := siteserver.New(siteserver.Config{Store: store, Keys: keys[lane],
				Cloud: &siteserver.CloudLane{RelayURL: br.Origin, SiteID: laneSite(lane), HTTPClient: relayHTTP}})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			ran := make(chan struct{})
			go func() { defer close(ran); _ = s.Run(runCtx, 2*time.Second, func(site.Report) {}) }()
			t.Cleanup(func() { stop(); <-ran })
			enqueue = func(id, body string) {
				var in siteserver.EnqueueInput
				if err := json.Unmarshal([]byte(body), &in); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Enqueue(ctx, in); err != nil {
					t.Fatalf("enqueue %s: %v", id, err)
				}
			}
		}
		for i := range jobs {
			id := fmt.Sprintf("%s-%03d", strings.ReplaceAll(lane, ".", "-"), i)
			body := fmt.Sprintf(`{"id":%q,"kind":"llm.generate","payload":{"prompt":"latency %d"},"owner":%q}`, id, i, jobOwner)
			start := time.Now()
			enqueue(id, body)
			t.Logf("%s enqueued %s", start.Format("15:04:05.000"), id)
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if at, ok := rec.sealed(id); ok {
					results[lane] = append(results[lane], at.Sub(start))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: job %s not sealed within a minute", lane, id)
				}
			}
			// Let the job end and, on the functions lane, the pump go idle.
			time.Sleep(3 * time.Second)
		}
	}
	line := "enqueue to payload sealed, " + fmt.Sprint(jobs) + " jobs each:"
	for _, lane := range lanes {
		d := slices.Sorted(slices.Values(results[lane]))
		line += fmt.Sprintf(" %s p50 %v p99 %v;", lane, d[len(d)/2].Round(time.Millisecond), d[(len(d)*99)/100].Round(time.Millisecond))
	}
	fmt.Println(line)
	t.Log(line)
	for _, lane := range lanes {
		t.Logf("%s: %v", lane, results[lane])
	}
}

// envLatency runs TestEnqueueToSealedFunctionsBesideRun.
const envLatency = "BYORELAY_SITEPUMP_LATENCY"

func laneSite(lane string) string { return "site-latency-" + strings.ReplaceAll(lane, ".", "-") }
