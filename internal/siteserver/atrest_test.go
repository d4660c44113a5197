package siteserver_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// atRestJobs is how many jobs each lane runs before the table is scanned.
const atRestJobs = 20

// markers are a run's prompt and answer markers: random, so a hit can only
// be this run's text. The answer marker is the daemon's prefix, so it is in
// every answer and in no prompt.
func markers() (prompt, answer string) {
	return "PROMPTMARK" + strings.ToLower(rand.Text()), "ANSWERMARK" + strings.ToLower(rand.Text())
}

// siteTable is a fresh DynamoDB Local site table and a store over it.
func siteTable(t *testing.T, clk clock.Clock) (sitestore.Store, *dynamodb.Client, string) {
	t.Helper()
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("site")
	if err := sitedynamo.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return st, db, table
}

// scanFinds scans the whole table and reports each item that holds one of
// the markers anywhere (any attribute, any nesting, as JSON).
func scanFinds(t *testing.T, db *dynamodb.Client, table string, marks ...string) (items int, hits []string) {
	t.Helper()
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			items++
			raw, err := json.Marshal(it)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range marks {
				if strings.Contains(strings.ToLower(string(raw)), strings.ToLower(m)) {
					hits = append(hits, fmt.Sprintf("%s in %s", m, raw))
				}
			}
		}
	}
	return items, hits
}

// appResult reads a job's result through the app API, as the site's
// backend does.
func appResult(t *testing.T, srv *siteserver.Server, id, owner string) siteserver.JobResult {
	t.Helper()
	resp := srv.HandleApp(context.Background(), siteserver.Request{Method: http.MethodPost, Path: "/app/result",
		Body: []byte(fmt.Sprintf(`{"jobId":%q,"owner":%q}`, id, owner))})
	var r siteserver.JobResult
	if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &r) != nil {
		t.Fatalf("app result %s: %d %s", id, resp.Status, resp.Body)
	}
	return r
}

// startDirectSite serves a direct-lane site over st on loopback and pairs
// a Go daemon running backend with it, for alice; the daemon runs until the
// test ends.
func startDirectSite(t *testing.T, st sitestore.Store, backend daemon.Backend) *siteserver.Server {
	t.Helper()
	siteKeys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	var srv *siteserver.Server
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	srv, err = siteserver.New(siteserver.Config{Store: st, Keys: siteKeys, VerificationURL: ts.URL + "/pair"})
	if err != nil {
		t.Fatal(err)
	}
	deviceKeys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{RelayURL: ts.URL, Keys: deviceKeys, Backend: backend, Concurrency: 4,
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(d, 20*time.Millisecond)):
				return nil
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	t.Cleanup(func() { cancel(); <-ran })
	if _, err := d.Pair(ctx, "test daemon", func(c daemon.PairCode) {
		go func() {
			if _, err := srv.ApprovePairing(ctx, c.UserCode, "alice"); err != nil {
				t.Errorf("approve: %v", err)
			}
		}()
	}); err != nil {
		close(ran)
		t.Fatal(err)
	}
	go func() { defer close(ran); _ = d.Run(ctx) }()
	return srv
}

// waitEnded reads a job through the app API until it has ended.
func waitEnded(t *testing.T, srv *siteserver.Server, id string) siteserver.JobResult {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		r := appResult(t, srv, id, "alice")
		if r.State != sitestore.StateQueued && r.State != sitestore.StateClaimed && r.State != sitestore.StateRunning {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", id, r.State)
		}
	}
}

// TestTheDirectLaneStoresNoPromptOrAnswerInClear runs 20 jobs
// through a Go daemon paired with a site server on DynamoDB Local, then
// scans the table: neither the prompts' marker nor the answers' is in any
// item, and every answer read back through the app API is the daemon's.
func TestTheDirectLaneStoresNoPromptOrAnswerInClear(t *testing.T) {
	st, db, table := siteTable(t, nil)
	promptMark, answerMark := markers()
	srv := startDirectSite(t, st, daemon.EchoBackend{Prefix: answerMark + ": "})
	ctx := context.Background()
	prompts := map[string]string{}
	for i := range atRestJobs {
		prompt := fmt.Sprintf("%s question %d", promptMark, i)
		payload, _ := json.Marshal(map[string]string{"prompt": prompt})
		j, err := srv.Enqueue(ctx, siteserver.EnqueueInput{Kind: protocol.KindGenerate, Payload: payload, Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		prompts[j.ID] = prompt
	}
	for id, prompt := range prompts {
		want := answerMark + ": " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
		r := waitEnded(t, srv, id)
		if r.State != sitestore.StateOK || r.Outcome == nil || r.Outcome.TextOrEmpty() != want {
			t.Fatalf("job %s read back %+v, want ok %q", id, r, want)
		}
	}
	items, hits := scanFinds(t, db, table, promptMark, answerMark)
	if len(hits) != 0 {
		t.Fatalf("%d items hold a marker in the clear:\n%s", len(hits), strings.Join(hits, "\n"))
	}
	if items < atRestJobs {
		t.Fatalf("the scan read %d items; the %d jobs are not in this table", items, atRestJobs)
	}
}

// TestTheCloudLaneStoresNoPromptOrAnswerInClear is the same through
// a real relay: a site on the cloud lane over DynamoDB Local publishes 20
// jobs, a Go daemon paired to the relay answers them, the site collects
// and stores the results; the scan finds neither marker, and the app API
// reads back every answer the daemon produced.
func TestTheCloudLaneStoresNoPromptOrAnswerInClear(t *testing.T) {
	var table string
	var db *dynamodb.Client
	w := newCloudWorldOn(t, func(clk *clock.Manual) sitestore.Store {
		st, c, name := siteTable(t, clk)
		db, table = c, name
		return st
	})
	promptMark, answerMark := markers()
	d, err := daemon.New(daemon.Config{RelayURL: w.url, Keys: w.device.Keys, Clock: w.clock,
		Pairing: daemon.Pairing{RunnerID: w.device.RunnerID, Owner: w.device.Owner},
		Backend: daemon.EchoBackend{Prefix: answerMark + ": "}, Concurrency: 4,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	w.daemon = d
	s := w.start(nil)
	prompts := map[string]string{}
	for i := range atRestJobs {
		id := fmt.Sprintf("scan-%02d", i)
		prompts[id] = fmt.Sprintf("%s question %d", promptMark, i)
		w.enqueue(s, id, prompts[id])
	}
	w.settle(s, func() bool {
		for id := range prompts {
			if siteserver.FateOf(w.job(id)) == "" {
				return false
			}
		}
		return true
	})
	for id, prompt := range prompts {
		want := answerMark + ": " + daemon.ComposePrompt(protocol.KindGenerate, protocol.GeneratePayload(prompt))
		r := appResult(t, s, id, "alice")
		if r.State != sitestore.StateOK || r.Outcome == nil || r.Outcome.TextOrEmpty() != want {
			t.Fatalf("job %s read back %+v, want ok %q", id, r, want)
		}
	}
	items, hits := scanFinds(t, db, table, promptMark, answerMark)
	if len(hits) != 0 {
		t.Fatalf("%d items hold a marker in the clear:\n%s", len(hits), strings.Join(hits, "\n"))
	}
	if items < atRestJobs {
		t.Fatalf("the scan read %d items; the %d jobs are not in this table", items, atRestJobs)
	}
}
