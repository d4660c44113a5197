package sitefn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// BenchmarkDirectLaneLifecycleCapacity measures the DynamoDB capacity one
// small job's life costs on the direct lane, step by step, through the site
// functions' handlers over DynamoDB Local with ReturnConsumedCapacity on
// every call (store/dynamo's Meter): the app's enqueue, the daemon's
// heartbeat (holding nothing), claim, fetch and result, the heartbeat that
// renews the lease mid-run, and the app's result read.
//
//	go run ./localtest/withservices -- go test -run '^$' -bench DirectLaneLifecycleCapacity -benchtime 20x ./internal/sitefn/
//
// DynamoDB Local reports 0 for a query that finds nothing, where the
// service bills 0.5 RCU: the calls column counts those.
func BenchmarkDirectLaneLifecycleCapacity(b *testing.B) {
	ctx := context.Background()
	db := localtest.DynamoClient(b)
	table := localtest.UniqueName("site")
	if err := sitedynamo.CreateTable(ctx, db, table); err != nil {
		b.Fatal(err)
	}
	siteKeys, err := protocol.GenerateKeys()
	if err != nil {
		b.Fatal(err)
	}
	meter := &ddb.Meter{}
	clk := clock.NewManual(time.UnixMilli(1_800_000_000_000))
	st, err := Open(Env{TableName: table, VerificationURL: "https://site.test/pair"},
		Options{DB: db, Keys: siteKeys, Clock: clk, Meter: meter, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := st.Server(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// One paired device.
	device, _ := protocol.GenerateKeys()
	code := sitestore.NewUserCode()
	if err := st.Store.CreatePairing(ctx, sitestore.Pairing{DeviceCodeHash: "h", UserCode: code, State: sitestore.PairingPending,
		Device: device.Public(), ExpiresAt: clk.Now().UnixMilli() + 60_000, CreatedAt: clk.Now().UnixMilli()}); err != nil {
		b.Fatal(err)
	}
	runner, err := srv.ApprovePairing(ctx, code, "alice")
	if err != nil {
		b.Fatal(err)
	}
	now := func() int64 { return clk.Now().UnixMilli() }
	daemon := func(endpoint, body string) []byte {
		h := http.Header{}
		protocol.SignRequest(device, endpoint, runner.ID, now(), []byte(body)).SetHeaders(h, protocol.HeaderRunner)
		resp := srv.Handle(ctx, siteserver.Request{Method: http.MethodPost, Path: "/byollm/" + endpoint, Header: h, Body: []byte(body)})
		if resp.Status != 200 {
			b.Fatalf("%s: %d %s", endpoint, resp.Status, resp.Body)
		}
		return resp.Body
	}
	app := func(op, body string) {
		resp := srv.HandleApp(ctx, siteserver.Request{Method: http.MethodPost, Path: "/app/" + op, Header: http.Header{}, Body: []byte(body)})
		if resp.Status != 200 {
			b.Fatalf("app %s: %d %s", op, resp.Status, resp.Body)
		}
	}
	caps := `[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"private"}]`
	heartbeat := func(active string) {
		daemon("heartbeat", fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"daemonVersion":"0.1.1","capabilities":%s,"activeLeases":[%s]}`, runner.ID, caps, active))
	}

	steps := []string{"enqueue", "heartbeat", "claim", "fetch", "renew", "result", "read"}
	used := map[string]ddb.Capacity{}
	measure := func(step string, f func()) {
		meter.Reset()
		f()
		c := meter.Total()
		u := used[step]
		u.ReadUnits += c.ReadUnits
		u.WriteUnits += c.WriteUnits
		u.Calls += c.Calls
		used[step] = u
	}
	prompt := strings.Repeat("a small prompt ", 20) // ~300 characters
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("job-%d", i)
		measure("enqueue", func() {
			app("enqueue", fmt.Sprintf(`{"id":%q,"kind":"llm.generate","payload":{"prompt":%q},"owner":"alice"}`, id, prompt))
		})
		measure("heartbeat", func() { heartbeat("") })
		var claimed protocol.ClaimResponse
		measure("claim", func() {
			raw := daemon("claim", fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"capabilities":%s,"max":1}`, runner.ID, caps))
			if err := json.Unmarshal(raw, &claimed); err != nil || len(claimed.Jobs) != 1 {
				b.Fatalf("claim: %s", raw)
			}
		})
		lease := claimed.Jobs[0].Lease.ID
		var fetched protocol.FetchResponse
		measure("fetch", func() {
			raw := daemon("fetch", fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":%q,"leaseId":%q}`, runner.ID, id, lease))
			if err := json.Unmarshal(raw, &fetched); err != nil {
				b.Fatal(err)
			}
		})
		measure("renew", func() { heartbeat(fmt.Sprintf(`{"jobId":%q,"leaseId":%q}`, id, lease)) })
		plain, _ := protocol.SealedOutcome{Outcome: protocol.OKOutcome("echo: " + prompt), Ran: protocol.RunMetadata{Model: "m", BackendClass: "http", DurationMs: 5}}.Plaintext()
		env, err := protocol.Seal(plain, device, siteKeys.Public().Encryption, protocol.EnvelopeContext{JobID: id, SenderKeyID: device.KeyID(),
			RecipientKeyID: siteKeys.KeyID(), DeadlineAt: fetched.Envelope.DeadlineAt, Direction: protocol.DirectionResult})
		if err != nil {
			b.Fatal(err)
		}
		measure("result", func() {
			raw := daemon("result", fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":%q,"leaseId":%q,"envelope":%s,"disposition":"ok"}`, runner.ID, id, lease, mustJSON(env)))
			if !strings.Contains(string(raw), `"accepted":true`) {
				b.Fatalf("result: %s", raw)
			}
		})
		measure("read", func() { app("result", fmt.Sprintf(`{"jobId":%q,"owner":"alice"}`, id)) })
		clk.Advance(time.Millisecond)
	}
	b.StopTimer()
	var total ddb.Capacity
	var table2 strings.Builder
	fmt.Fprintf(&table2, "\n| step | calls/job | RCU/job | WCU/job |\n|---|---|---|---|\n")
	for _, s := range steps {
		u := used[s]
		n := float64(b.N)
		fmt.Fprintf(&table2, "| %s | %.1f | %.1f | %.1f |\n", s, float64(u.Calls)/n, u.ReadUnits/n, u.WriteUnits/n)
		total.Calls += u.Calls
		total.ReadUnits += u.ReadUnits
		total.WriteUnits += u.WriteUnits
	}
	n := float64(b.N)
	fmt.Fprintf(&table2, "| **job** | %.1f | %.1f | %.1f |\n", float64(total.Calls)/n, total.ReadUnits/n, total.WriteUnits/n)
	b.Log(table2.String())
	b.ReportMetric(total.ReadUnits/n, "RCU/job")
	b.ReportMetric(total.WriteUnits/n, "WCU/job")
	b.ReportMetric(float64(total.Calls)/n, "calls/job")
}

func mustJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(raw)
}
