package lambdadev

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
)

// siteSteps are the site stack's sample events in an order where every
// answer is a real one: the demo daemon claims the queued demo job, and
// each later event names the lease that claim granted.
var siteSteps = []invokeStep{
	{fn: sitefn.Pair, status: 200, body: `"userCode":"`},
	{fn: sitefn.Claim, status: 200, body: `"id":"demo-job-1"`},
	{fn: sitefn.Fetch, status: 200, body: `{"envelope":{`},
	{fn: sitefn.Heartbeat, status: 200, body: `"lost":[]`},
	{fn: sitefn.Result, status: 200, body: `{"accepted":true,"state":"ok"}`},
	// The job is complete: its lease is gone, so nothing is released.
	{fn: sitefn.Release, status: 200, body: `{"released":[]}`},
	{fn: sitefn.App, status: 200, body: `"outcome":{"outcome":"ok","text":"demo result: hello"}`},
	{fn: sitefn.Sweeper},
	// On the cloud lane's environment, over the demo world's direct-lane
	// job: nothing is the pump's, so it answers idle without a relay.
	{fn: sitefn.Pump},
}

// Every site-stack sample event (events/site*.json) through the real
// bootstrap under the emulator, against DynamoDB Local holding the site
// demo world, with the site's keys read from SSM (moto) as deployed: what
// `make invoke FN=site…` does, for all of them.
func TestEverySiteSampleEventInvokesThroughTheEmulator(t *testing.T) {
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
	motoEndpoint := localtest.MotoEndpoint(t)
	rie, err := InstallRIE(ctx, filepath.Join(root, ".cache", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	bins := builtFunctions(ctx, t, root)

	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := dynamodb.NewFromConfig(localtest.AWSConfig(endpoint))
	table := localtest.UniqueName("site-invoke")
	st, err := OpenDemoSite(ctx, world, db, table)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := world.SiteKeysJSON()
	if err != nil {
		t.Fatal(err)
	}
	param := "/" + table + "/site-keys"
	if _, err := ssm.NewFromConfig(localtest.AWSConfig(motoEndpoint)).PutParameter(ctx, &ssm.PutParameterInput{
		Name: aws.String(param), Value: aws.String(string(keys)), Type: ssmtypes.ParameterTypeSecureString,
	}); err != nil {
		t.Fatal(err)
	}

	if len(siteSteps) != len(sitefn.Functions()) {
		t.Fatalf("%d steps for %d site functions: every function's event must be invoked", len(siteSteps), len(sitefn.Functions()))
	}
	for _, step := range siteSteps {
		f, err := sitefn.Lookup(step.fn)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(root, "events", f.Name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := demo.SiteLease(ctx, st.Store)
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		emu, err := StartEmulator(ctx, rie, bins[f.Name], []string{
			"TABLE_NAME=" + table,
			"SITE_KEYS_PARAMETER=" + param,
			"VERIFICATION_URL=" + demo.SiteVerificationURL,
			"AWS_ENDPOINT_URL_DYNAMODB=" + endpoint,
			"AWS_ENDPOINT_URL_SSM=" + motoEndpoint,
			"AWS_REGION=us-east-1",
			"AWS_ACCESS_KEY_ID=local",
			"AWS_SECRET_ACCESS_KEY=local",
			"AWS_LAMBDA_FUNCTION_NAME=byorelay-" + f.Name,
			"RELAY_URL=" + pumpRelay(f), "RELAY_SITE_ID=" + pumpSite(f),
			"PUMP_FUNCTION=sitepump", "PUMP_WAKEUP_GROUP=local", "PUMP_WAKEUP_ROLE_ARN=arn:aws:iam::000000000000:role/local",
		}, &logs)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		event, err := PrepareSiteEvent(f, raw, world, time.Now(), lease)
		if err != nil {
			emu.Stop()
			t.Fatalf("%s: %v", f.Name, err)
		}
		answer, err := emu.Invoke(ctx, event)
		emu.Stop()
		if err != nil {
			t.Fatalf("%s: %v\n%s", f.Name, err, logs.String())
		}
		if f.Kind == sitefn.KindPump {
			if !strings.Contains(string(answer), `"pumped":false,"stopped":"idle`) {
				t.Errorf("%s: answer %s, want idle\n%s", f.Name, answer, logs.String())
			}
			continue
		}
		if f.Kind == sitefn.KindSchedule {
			// The sweeper reports what it ended: nothing was due.
			const want = `{"expired":0,"unblocked":0,"failed":0,"backlogAgeMs":0}`
			if string(answer) != want {
				t.Errorf("%s: answer %s, want %s", f.Name, answer, want)
			}
			continue
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(answer, &resp); err != nil {
			t.Fatalf("%s: answer is not an HTTP API response: %s", f.Name, answer)
		}
		if resp.StatusCode != step.status || !strings.Contains(resp.Body, step.body) || !json.Valid([]byte(resp.Body)) {
			t.Errorf("%s: %d %s\nwant %d with %s\nlogs:\n%s", f.Name, resp.StatusCode, resp.Body, step.status, step.body, logs.String())
		}
		if f.Name == sitefn.Claim && lease != demo.NoLease {
			t.Errorf("claim: the demo job was already leased (%s) before the claim event", lease)
		}
	}
}

// pumpRelay and pumpSite are the cloud lane's RELAY_URL and RELAY_SITE_ID
// for the pump, "" (the direct lane) for every other function.
func pumpRelay(f sitefn.Function) string {
	if f.Kind == sitefn.KindPump {
		return "http://127.0.0.1:1"
	}
	return ""
}

func pumpSite(f sitefn.Function) string {
	if f.Kind == sitefn.KindPump {
		return "site-invoke"
	}
	return ""
}
