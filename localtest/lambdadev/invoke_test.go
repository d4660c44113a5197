package lambdadev

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/store/dynamo"
)

// invokeStep is one sample event and what its function must answer, in an
// order that makes every answer a real one: the job the enqueue event
// publishes is the one the claim event takes and the payload event seals.
type invokeStep struct {
	fn     string
	status int
	// body, when set, must appear in the answer's body.
	body string
}

var invokeSteps = []invokeStep{
	{fn: lambdafn.Pair, status: 200, body: `"runnerId":"runner-demo"`},
	{fn: lambdafn.Enqueue, status: 200, body: `{"jobId":"demo-job-1","state":"queued"}`},
	{fn: lambdafn.Pending, status: 200, body: `{"jobs":[]`},
	{fn: lambdafn.Claim, status: 200, body: `"id":"demo-job-1"`},
	{fn: lambdafn.Payload, status: 200, body: `{"jobId":"demo-job-1","state":"ready"}`},
	// {{leaseId}} is the lease the claim granted (demo.RelayLease), so the
	// daemon's calls act on the grant: it fetches the sealed payload, ...
	{fn: lambdafn.Fetch, status: 200, body: `"direction":"payload"`},
	// ... appends a frame to the job's stream log under its lease, ...
	{fn: lambdafn.StreamAppend, status: 200, body: `"seq":`},
	// A signed attach for a job with no stream: absent, as Server-Sent
	// Events through the function URL's streaming response, and the body
	// ends there.
	{fn: lambdafn.StreamAttach, status: 200, body: "data: {\"type\":\"absent\"}\n\n"},
	{fn: lambdafn.Heartbeat, status: 200, body: `"lost":[`},
	// ... and reports its result, which the site then collects.
	{fn: lambdafn.Result, status: 200, body: `{"accepted":true,"state":"done"}`},
	{fn: lambdafn.Release, status: 200, body: `{"released":[]}`},
	{fn: lambdafn.Cancel, status: 200, body: `{"cancelled":true}`},
	{fn: lambdafn.Results, status: 200, body: `"jobId":"demo-job-1"`},
	{fn: lambdafn.CatchAll, status: 404, body: `{"error":"not-found"}`},
	{fn: lambdafn.Admin, status: 200, body: `"siteId":"demo-site"`},
	{fn: lambdafn.Sweeper},
}

// built is every function built once for this test binary: the relay's
// and the site stack's emulator tests share one go build.
var built struct {
	sync.Mutex
	bins map[string]string
	dir  string
}

func builtFunctions(ctx context.Context, t *testing.T, root string) map[string]string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.bins == nil {
		dir, err := os.MkdirTemp("", "lambdadev-test-")
		if err != nil {
			t.Fatal(err)
		}
		bins, err := BuildAll(ctx, root, dir, "")
		if err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		built.bins, built.dir = bins, dir
	}
	return built.bins
}

// TestMain removes the shared build and stops the services the tests
// started (localtest.Main's work).
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	localtest.Stop()
	os.Exit(code)
}

// Every sample event in events/ through the real bootstrap, built for this
// machine, under the Lambda runtime interface emulator, against DynamoDB
// Local holding the demo projection: what `make invoke` does, for all of
// them, in an order where each answer is meaningful.
func TestEverySampleEventInvokesThroughTheEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function and runs the emulator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := localtest.DynamoEndpoint(t)
	rie, err := InstallRIE(ctx, filepath.Join(root, ".cache", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	bins := builtFunctions(ctx, t, root)

	// Fresh keys for this test, so it never depends on (or rewrites) the
	// developer's .cache/demo.
	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := "invoke-" + time.Now().Format("150405.000000")
	if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), table); err != nil {
		t.Fatal(err)
	}
	routing, err := dynamo.New(dynamo.Config{DB: dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), Table: table})
	if err != nil {
		t.Fatal(err)
	}

	if len(invokeSteps) != len(lambdafn.Functions()) {
		t.Fatalf("%d steps for %d functions: every function's event must be invoked", len(invokeSteps), len(lambdafn.Functions()))
	}
	for _, step := range invokeSteps {
		f, err := lambdafn.Lookup(step.fn)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(root, "events", f.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		// The lease the claim step granted, as `byorelay invoke` finds it.
		lease, err := demo.RelayLease(ctx, routing)
		if err != nil {
			t.Fatal(err)
		}
		event, err := PrepareEvent(f, raw, world, time.Now(), lease)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		var logs bytes.Buffer
		emu, err := StartEmulator(ctx, rie, bins[f.Name], []string{
			"TABLE_NAME=" + table,
			"AWS_ENDPOINT_URL_DYNAMODB=" + endpoint,
			"AWS_REGION=us-east-1",
			"AWS_ACCESS_KEY_ID=local",
			"AWS_SECRET_ACCESS_KEY=local",
			"AWS_LAMBDA_FUNCTION_NAME=byorelay-" + f.Name,
		}, &logs)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		answer, err := emu.Invoke(ctx, event)
		emu.Stop()
		if err != nil {
			t.Fatalf("%s: %v\n%s", f.Name, err, logs.String())
		}
		if f.Kind == lambdafn.KindSchedule {
			var rep lambdafn.SweepReport
			if err := json.Unmarshal(answer, &rep); err != nil || rep.Trigger != "schedule" {
				t.Errorf("%s: answer %s, want a sweep report for the schedule trigger", f.Name, answer)
			}
			continue
		}
		if f.Kind == lambdafn.KindStream {
			got, err := DecodeStreamed(answer)
			if err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			if got.StatusCode != step.status || got.Headers["Content-Type"] != "text/event-stream; charset=utf-8" || got.Body != step.body {
				t.Errorf("%s: %+v\nwant %d, SSE, body %q\nlogs:\n%s", f.Name, got, step.status, step.body, logs.String())
			}
			continue
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(answer, &resp); err != nil {
			t.Fatalf("%s: answer is not an HTTP API response: %s", f.Name, answer)
		}
		if resp.StatusCode != step.status || !strings.Contains(resp.Body, step.body) {
			t.Errorf("%s: %d %s\nwant %d with %s\nlogs:\n%s", f.Name, resp.StatusCode, resp.Body, step.status, step.body, logs.String())
		}
		if f.Name == lambdafn.Claim && !strings.Contains(logs.String(), `"JobsGranted":1`) {
			t.Errorf("claim: no EMF record of the grant in the function's output:\n%s", logs.String())
		}
	}
}
