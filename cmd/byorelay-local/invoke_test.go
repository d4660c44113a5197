package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/lambdadev"
	"github.com/byorelay/byorelay/protocol"
)

func TestInvokeRefusesMisuse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no function or event", nil, 2},
		{"an event without a function", []string{"../../events/claim.json"}, 2},
		{"a function that does not exist", []string{"nope", "../../events/claim.json"}, 2},
		{"a site-stack function's event file that does not exist", []string{"siteclaim", "no-such-event.json"}, 1},
		{"an event file that does not exist", []string{"claim", "no-such-event.json"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := runInvoke(context.Background(), tt.args, &out, &errs); code != tt.code {
				t.Fatalf("exit %d, want %d (stderr: %s)", code, tt.code, errs.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
		})
	}
}

// The self-contained path: no TABLE_NAME, so invoke starts DynamoDB Local,
// seeds the demo (keys made fresh in a temporary directory) and runs the
// catch-all's sample event, which must answer as the reference answers a
// claim outside the base path.
func TestInvokeInProcessRunsOnItsOwnDynamoDBLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	t.Setenv("BYORELAY_DEMO_DIR", t.TempDir())
	t.Setenv("TABLE_NAME", "")
	// The function's own output (its log lines, EMF) is printed with -v
	// only: without it the answer is not buried under it.
	for _, verbose := range []bool{false, true} {
		args := []string{"-in-process", "catchall", "../../events/catchall.json"}
		if verbose {
			args = append([]string{"-v"}, args...)
		}
		var out, errs bytes.Buffer
		if code := runInvoke(context.Background(), args, &out, &errs); code != 0 {
			t.Fatalf("exit %d: %s", code, errs.String())
		}
		var resp struct {
			StatusCode int    `json:"statusCode"`
			Body       string `json:"body"`
		}
		if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
			t.Fatalf("stdout is not a response: %q", out.String())
		}
		if resp.StatusCode != 404 || resp.Body != `{"error":"not-found"}` {
			t.Fatalf("answer = %d %s", resp.StatusCode, resp.Body)
		}
		if got := strings.Contains(errs.String(), `"Refusals":1`); got != verbose {
			t.Errorf("-v %v: an EMF record on stderr %v:\n%s", verbose, got, errs.String())
		}
		if got := strings.Contains(errs.String(), `"msg":"request"`); got != verbose {
			t.Errorf("-v %v: the function's request log on stderr %v:\n%s", verbose, got, errs.String())
		}
	}
}

// events/README.md's "against the running stack": TABLE_NAME and a
// loopback AWS_ENDPOINT_URL_DYNAMODB, with the developer's own AWS
// credentials still in the environment. DynamoDB Local keeps tables per
// access key, so invoke must use the stack's (local/local) or the function
// finds no table and answers 500.
func TestInvokeOnARunningStackUsesItsOwnCredentials(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BYORELAY_DEMO_DIR", dir)
	world, err := demo.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := localtest.DynamoEndpoint(t)
	table := localtest.UniqueName("invoke-stack")
	// As `byorelay-local serve` makes it: under localtest.AWSConfig's credentials.
	if err := world.Seed(t.Context(), dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), table); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TABLE_NAME", table)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEDEVELOPER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-local")
	t.Setenv("AWS_REGION", "eu-west-2")
	var out, errs bytes.Buffer
	if code := runInvoke(context.Background(), []string{"-in-process", "claim", "../../events/claim.json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil || resp.StatusCode != 200 {
		t.Fatalf("claim against the stack's table: %s\n%s", out.String(), errs.String())
	}
}

// A site-stack function, self-contained and in-process: invoke starts
// DynamoDB Local, seeds the site demo world (the demo daemon paired as
// runner-demo, demo-job-1 queued) and runs the claim sample, which takes
// the queued job under a fresh lease.
func TestInvokeInProcessRunsASiteEventOnTheDemoWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	t.Setenv("BYORELAY_DEMO_DIR", t.TempDir())
	t.Setenv("TABLE_NAME", "")
	var out, errs bytes.Buffer
	if code := runInvoke(context.Background(), []string{"-in-process", "siteclaim", "../../events/siteclaim.json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("stdout is not a response: %q", out.String())
	}
	var claim protocol.ClaimResponse
	if resp.StatusCode != 200 || protocol.DecodeStrict([]byte(resp.Body), &claim) != nil {
		t.Fatalf("answer = %d %s", resp.StatusCode, resp.Body)
	}
	if len(claim.Jobs) != 1 || claim.Jobs[0].ID != demo.JobID || claim.Jobs[0].Lease.RunnerID != demo.RunnerID {
		t.Fatalf("claim = %+v, want %s leased to %s", claim, demo.JobID, demo.RunnerID)
	}
}

// With TABLE_NAME set a site function acts on that table as it is, so it
// must hold the site demo world: a relay table (or a site stack started
// without --demo) is refused with what to do, before any event is sent;
// so is a table on a non-loopback endpoint.
func TestInvokeOfASiteFunctionNeedsTheSiteDemoWorld(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BYORELAY_DEMO_DIR", dir)
	world, err := demo.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := localtest.DynamoEndpoint(t)
	relayTable := localtest.UniqueName("invoke-relay")
	if err := world.Seed(t.Context(), dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), relayTable); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, table, endpoint, want string }{
		{"a relay table", relayTable, endpoint, "holds no site demo world"},
		{"a deployed table", "byorelay-site", "", "local site stack only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TABLE_NAME", tt.table)
			t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", tt.endpoint)
			t.Setenv("AWS_ENDPOINT_URL", "")
			var out, errs bytes.Buffer
			if code := runInvoke(context.Background(), []string{"-in-process", "siteclaim", "../../events/siteclaim.json"}, &out, &errs); code != 1 {
				t.Fatalf("exit %d, want 1 (stderr: %s)", code, errs.String())
			}
			if !strings.Contains(errs.String(), tt.want) || !strings.Contains(errs.String(), "--demo") || out.Len() != 0 {
				t.Errorf("stdout %q, stderr %q", out.String(), errs.String())
			}
		})
	}
}

// A running `byorelay-local site --demo`'s table, with the developer's own AWS
// settings in the environment: invoke uses the local stack's credentials,
// claims the queued demo job, and a fetch then names the lease that claim
// granted (read from the table) and gets the payload resealed to the
// demo device.
func TestInvokeOfSiteFunctionsActsOnARunningSiteStack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BYORELAY_DEMO_DIR", dir)
	world, err := demo.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := localtest.DynamoEndpoint(t)
	table := localtest.UniqueName("invoke-site-stack")
	// As `byorelay-local site --demo` makes it: under localtest.AWSConfig's credentials.
	if _, err := lambdadev.OpenDemoSite(t.Context(), world, dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), table); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TABLE_NAME", table)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEDEVELOPER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-local")
	t.Setenv("AWS_REGION", "eu-west-2")
	t.Setenv("AWS_PROFILE", "no-such-profile")
	for _, step := range []struct{ fn, want string }{
		{"siteclaim", `"id":"demo-job-1"`},
		{"sitefetch", `{"envelope":{`},
	} {
		var out, errs bytes.Buffer
		if code := runInvoke(context.Background(), []string{"-in-process", step.fn, "../../events/" + step.fn + ".json"}, &out, &errs); code != 0 {
			t.Fatalf("%s: exit %d: %s", step.fn, code, errs.String())
		}
		var resp struct {
			StatusCode int    `json:"statusCode"`
			Body       string `json:"body"`
		}
		if err := json.Unmarshal(out.Bytes(), &resp); err != nil || resp.StatusCode != 200 || !strings.Contains(resp.Body, step.want) {
			t.Fatalf("%s against the site stack's table: %s\n%s", step.fn, out.String(), errs.String())
		}
	}
}

// The fresh-table note must see the job in payload.json's base64 body too.
func TestEventMentionsReadsPlainAndBase64Bodies(t *testing.T) {
	for _, name := range []string{"fetch", "payload"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "events", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if !eventMentions(raw, demo.JobID) {
			t.Errorf("events/%s.json: does not mention %s", name, demo.JobID)
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "pending.json"))
	if err != nil {
		t.Fatal(err)
	}
	if eventMentions(raw, demo.JobID) {
		t.Errorf("events/pending.json: mentions %s", demo.JobID)
	}
}
