package sitefn

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/sitepump"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// TestTheRegistryIsTheSiteTemplate: every function in the registry is a
// resource of site-template.yaml with its route, and has its directory
// under functions/.
func TestTheRegistryIsTheSiteTemplate(t *testing.T) {
	tpl := string(byorelay.SiteTemplate)
	for _, f := range Functions() {
		if !strings.Contains(tpl, "\n  "+f.LogicalID+":\n") {
			t.Errorf("%s: site-template.yaml has no resource %s", f.Name, f.LogicalID)
		}
		if f.Route != "" {
			method, path, _ := strings.Cut(f.Route, " ")
			if !strings.Contains(tpl, "Path: "+path+"\n            Method: "+method+"\n") {
				t.Errorf("%s: site-template.yaml declares no route %s", f.Name, f.Route)
			}
		}
		if _, err := os.Stat(filepath.Join("..", "..", "functions", f.Name, "main.go")); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
}

// TestRolesGrantTheSSMCallsTheCodeMakes: each site function's role grants
// what its code calls in SSM and nothing more. Every function is opened
// through the deployed wiring, with the environment site-template.yaml
// gives it (SITE_KEYS_PARAMETER included: the Globals set it for the
// sweeper too), against an SSM stand-in that records each call and refuses
// it; an HTTP function is sent one request (its first reads the keys), the
// sweeper sweeps a table on DynamoDB Local. The template must grant each
// function exactly the calls it made, on the keys' parameter alone, and
// nothing outside DynamoDB, S3 and SSM, the only clients a site function
// links.
// A grant the code does not use lets a role read the site's private keys
// for nothing; a call the grant misses answers every request 503 once
// deployed.
func TestRolesGrantTheSSMCallsTheCodeMakes(t *testing.T) {
	ctx := context.Background()
	const keysParam = "/site/keys"
	var mu sync.Mutex
	var calls []string
	ssmStub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Names []string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSSM.")
		mu.Lock()
		calls = append(calls, "ssm:"+op+" of "+strings.Join(in.Names, ", "))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"AccessDeniedException","message":"the stand-in refuses every call"}`))
	}))
	t.Cleanup(ssmStub.Close)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": localtest.DynamoEndpoint(t), "ssm": ssmStub.URL})
	table := localtest.UniqueName("site-roles")
	if err := sitedynamo.CreateTable(ctx, localtest.DynamoClient(t), table); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TABLE_NAME", table)
	t.Setenv("SITE_KEYS_PARAMETER", keysParam)
	t.Setenv("VERIFICATION_URL", "https://site.example/pair")

	granted := ssmGrants(t)
	keysARN := "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${SiteKeysParameter}"
	for _, f := range Functions() {
		mu.Lock()
		calls = nil
		mu.Unlock()
		if f.Kind == KindPump {
			// The pump is the cloud lane's: opened with the lane's
			// environment, and given a job to publish, so it reads the keys.
			t.Setenv("RELAY_URL", "http://127.0.0.1:1")
			t.Setenv("RELAY_SITE_ID", "site-roles")
			t.Setenv("PUMP_FUNCTION", "sitepump")
			t.Setenv("PUMP_WAKEUP_GROUP", "pump")
			t.Setenv("PUMP_WAKEUP_ROLE_ARN", "arn:aws:iam::000000000000:role/pump-wakeup")
			seed, err := sitedynamo.New(sitedynamo.Config{DB: localtest.DynamoClient(t), Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := seed.Create(ctx, sitestore.CreateInput{ID: "job-roles", Kind: "chat", Audience: "team",
				SizeClass: "small", Owner: "u", AwaitingPublish: true}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := open(f.Name)()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		switch h := h.(type) {
		case Handler:
			_, path, _ := strings.Cut(f.Route, " ")
			ev := events.APIGatewayV2HTTPRequest{RawPath: strings.Replace(path, "{proxy+}", "availability", 1)}
			ev.RequestContext.HTTP.Method = http.MethodPost
			if resp, err := h(ctx, ev); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("%s answered %d (%v) with SSM refusing; want 503", f.Name, resp.StatusCode, err)
			}
		case func(context.Context) (SweepReport, error):
			if _, err := h(ctx); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
		case func(context.Context, sitepump.Event) (sitepump.Report, error):
			if _, err := h(ctx, sitepump.Event{Trigger: sitepump.TriggerInvoke}); err == nil {
				t.Fatalf("%s pumped with SSM refusing the keys", f.Name)
			}
		default:
			t.Fatalf("%s: a handler of type %T", f.Name, h)
		}
		mu.Lock()
		made := slices.Compact(slices.Sorted(slices.Values(calls)))
		mu.Unlock()
		var want []string
		for _, c := range made {
			action, names, _ := strings.Cut(c, " of ")
			if names != keysParam {
				t.Errorf("%s asked SSM for %q, want the keys' parameter %s alone", f.Name, names, keysParam)
			}
			want = append(want, action+" on "+keysARN)
		}
		if got := granted[f.LogicalID]; !slices.Equal(got, want) {
			t.Errorf("%s called %q; its role grants %q, want %q", f.Name, made, got, want)
		}
		if f.ReadsKeys() != (len(made) > 0) {
			t.Errorf("%s: ReadsKeys is %v, but it made the SSM calls %q", f.Name, f.ReadsKeys(), made)
		}
	}
}

// ssmGrants is the SSM actions each site function's role allows, sorted,
// each with the resources it is allowed on. A grant outside DynamoDB, S3
// (the envelope bucket) and SSM fails the test.
func ssmGrants(t *testing.T) map[string][]string {
	t.Helper()
	var tpl struct {
		Resources map[string]struct {
			Properties struct {
				Policies []struct {
					Statement []map[string]any `yaml:"Statement"`
				} `yaml:"Policies"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &tpl); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range Functions() {
		for _, pol := range tpl.Resources[f.LogicalID].Properties.Policies {
			for _, st := range pol.Statement {
				if st["Effect"] != "Allow" {
					t.Fatalf("%s: a statement that does not Allow: %v", f.Name, st)
				}
				for _, a := range oneOrMany(st["Action"]) {
					switch service, _, _ := strings.Cut(a, ":"); service {
					case "dynamodb", "s3", "lambda", "scheduler", "iam":
					case "ssm":
						out[f.LogicalID] = append(out[f.LogicalID], a+" on "+strings.Join(oneOrMany(st["Resource"]), ", "))
					default:
						t.Errorf("%s may %s: a site function calls DynamoDB, S3 and SSM alone", f.Name, a)
					}
				}
			}
		}
		slices.Sort(out[f.LogicalID])
	}
	return out
}

// oneOrMany is an IAM statement's Action or Resource: one string or a list.
func oneOrMany(v any) []string {
	if list, ok := v.([]any); ok {
		out := make([]string, len(list))
		for i, x := range list {
			out[i] = fmt.Sprint(x)
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

func TestEnvNeedsATableAndPositiveDurations(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := LoadEnv(env(map[string]string{})); err == nil {
		t.Error("no TABLE_NAME was accepted")
	}
	for _, bad := range []string{"0", "-1", "1.5", "3651", "a week"} {
		if _, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "ANSWER_RETENTION_DAYS": bad})); err == nil {
			t.Errorf("ANSWER_RETENTION_DAYS=%q was accepted", bad)
		}
	}
	if e, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "ANSWER_RETENTION_DAYS": "7"})); err != nil || e.RetentionMs != 7*24*60*60_000 {
		t.Errorf("ANSWER_RETENTION_DAYS=7: %+v %v", e, err)
	}
	if _, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "LEASE_MS": "-1"})); err == nil {
		t.Error("a negative LEASE_MS was accepted")
	}
	e, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "LEASE_MS": "5000", "PAIRING_TTL_MS": "2000", "VERIFICATION_URL": "https://x/pair"}))
	if err != nil || e.LeaseMs != 5000 || e.PairingTTLMs != 2000 || e.VerificationURL != "https://x/pair" {
		t.Fatalf("%+v %v", e, err)
	}
}

// SITE_KEYS_PARAMETER through the deployed wiring, with the AWS
// configuration from the environment Lambda sets: the keys come back from
// moto's SSM through internal/platform/paramstore, as written. A function starts without
// reading them; its first request does. While they cannot be read (a
// missing parameter, or a plain String one: the site's private keys in the
// clear) every request is answered 503 and none reaches the server.
func TestSiteKeysAreReadFromASecureStringOnFirstRequest(t *testing.T) {
	ctx := context.Background()
	moto := localtest.MotoEndpoint(t)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": localtest.DynamoEndpoint(t), "ssm": moto})
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := json.Marshal(keys.Stored(1))
	if err != nil {
		t.Fatal(err)
	}
	sdk := ssm.NewFromConfig(localtest.AWSConfig(moto))
	base := "/" + localtest.UniqueName("site-keys")
	for name, typ := range map[string]types.ParameterType{"/secure": types.ParameterTypeSecureString, "/plain": types.ParameterTypeString} {
		if _, err := sdk.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(base + name), Value: aws.String(string(stored)), Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := container.AWSFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := keysFromSSM(ctx, paramstore.New(cfg, moto), base+"/secure")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(got.Stored(1)); string(again) != string(stored) {
		t.Fatalf("keys read back as %s, want %s", again, stored)
	}
	open := func(param string) *Stack {
		t.Helper()
		st, err := Open(Env{TableName: "unused-table", SiteKeysParameter: param, VerificationURL: "https://site.example/pair"}, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("%s: Open read the keys at start, or failed for want of them: %v", param, err)
		}
		return st
	}
	srv, err := open(base + "/secure").Server(ctx)
	if err != nil || srv.SiteKeyID() != keys.KeyID() {
		t.Fatalf("the server is not built over the parameter's keys: %v", err)
	}
	for _, param := range []string{base + "/plain", base + "/missing"} {
		h, err := open(param).Handler(App)
		if err != nil {
			t.Fatal(err)
		}
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/app/availability"}
		ev.RequestContext.HTTP.Method = http.MethodPost
		resp, err := h(ctx, ev)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Body, `"error":"server-error"`) {
			t.Fatalf("%s: %d %s %v, want 503 server-error", param, resp.StatusCode, resp.Body, err)
		}
	}
}

// TestTheSiteTemplateAlarmsOnTheSweepersBacklog: the alarm reads the
// metric the sweeper writes, under its namespace and dimension.
func TestTheSiteTemplateAlarmsOnTheSweepersBacklog(t *testing.T) {
	var tpl struct {
		Resources map[string]struct {
			Type       string         `yaml:"Type"`
			Properties map[string]any `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &tpl); err != nil {
		t.Fatal(err)
	}
	a, ok := tpl.Resources["SiteSweepBacklogAlarm"]
	if !ok || a.Type != "AWS::CloudWatch::Alarm" {
		t.Fatal("site-template.yaml has no SiteSweepBacklogAlarm")
	}
	p := a.Properties
	if p["Namespace"] != MetricsNamespace || p["MetricName"] != MetricSweepBacklogAge {
		t.Fatalf("alarm reads %v/%v, the sweeper writes %s/%s", p["Namespace"], p["MetricName"], MetricsNamespace, MetricSweepBacklogAge)
	}
	dims, _ := p["Dimensions"].([]any)
	d, _ := dims[0].(map[string]any)
	if len(dims) != 1 || d["Name"] != "Function" || d["Value"] != Sweeper {
		t.Fatalf("alarm dimensions %v, want Function=%s", dims, Sweeper)
	}
	var buf bytes.Buffer
	writeSweepEMF(&buf, SweepReport{BacklogAgeMs: 1234}, time.Unix(0, 0))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec[MetricSweepBacklogAge] != float64(1234) || rec["Function"] != Sweeper {
		t.Fatalf("EMF record %s: %v", buf.String(), err)
	}
}

// TestTheSiteTemplateAlarmsOnCheckpointFailures: the alarm reads the
// metric the stream fault hook writes, on the checkpoint kind, and a
// fault of that kind writes a record it counts.
func TestTheSiteTemplateAlarmsOnCheckpointFailures(t *testing.T) {
	var tpl struct {
		Resources map[string]struct {
			Type       string         `yaml:"Type"`
			Properties map[string]any `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &tpl); err != nil {
		t.Fatal(err)
	}
	a, ok := tpl.Resources["SiteCheckpointFailuresAlarm"]
	if !ok || a.Type != "AWS::CloudWatch::Alarm" {
		t.Fatal("site-template.yaml has no SiteCheckpointFailuresAlarm")
	}
	p := a.Properties
	if p["Namespace"] != MetricsNamespace || p["MetricName"] != MetricStreamFaults || p["Statistic"] != "Sum" {
		t.Fatalf("alarm reads %v/%v (%v), the hook writes %s/%s", p["Namespace"], p["MetricName"], p["Statistic"], MetricsNamespace, MetricStreamFaults)
	}
	dims, _ := p["Dimensions"].([]any)
	d, _ := dims[0].(map[string]any)
	if len(dims) != 1 || d["Name"] != "Kind" || d["Value"] != string(site.FaultCheckpoint) {
		t.Fatalf("alarm dimensions %v, want Kind=%s", dims, site.FaultCheckpoint)
	}
	if actions, _ := p["AlarmActions"].([]any); len(actions) != 1 {
		t.Fatalf("alarm actions %v", p["AlarmActions"])
	}

	var buf bytes.Buffer
	writeStreamFaultEMF(&buf, site.StreamFault{Kind: site.FaultCheckpoint, JobID: "j", LeaseID: "l", Reason: "the checkpoint write at 512 units failed"}, time.Unix(0, 0))
	var rec struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Kind   string
		Faults float64 `json:"StreamFaults"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.Kind != "checkpoint" || rec.Faults != 1 ||
		len(rec.AWS.CloudWatchMetrics) != 1 || rec.AWS.CloudWatchMetrics[0].Namespace != MetricsNamespace ||
		len(rec.AWS.CloudWatchMetrics[0].Dimensions) != 1 || rec.AWS.CloudWatchMetrics[0].Dimensions[0][0] != "Kind" ||
		rec.AWS.CloudWatchMetrics[0].Metrics[0].Name != MetricStreamFaults {
		t.Fatalf("EMF record %s: %v", buf.String(), err)
	}
	if strings.Contains(buf.String(), "512 units") {
		t.Fatalf("the metric record carries the reason: %s", buf.String())
	}
}

// TestAnswersCrossAPIGatewayAsTheRelaysDo: a body that is not UTF-8 goes
// base64, and each Set-Cookie goes in the cookie list, not joined into a
// header.
func TestAnswersCrossAPIGatewayAsTheRelaysDo(t *testing.T) {
	raw := []byte{0x7b, 0xff, 0x00, 0xfe, 0x7d}
	resp := toAPIGateway(siteserver.Response{Status: http.StatusOK, Body: raw, Header: http.Header{
		"Content-Type": {"application/octet-stream"},
		"Set-Cookie":   {"a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT", "b=2"},
	}})
	body, err := base64.StdEncoding.DecodeString(resp.Body)
	if !resp.IsBase64Encoded || err != nil || !bytes.Equal(body, raw) {
		t.Fatalf("body %q base64=%v: want the bytes base64-encoded", resp.Body, resp.IsBase64Encoded)
	}
	if len(resp.Cookies) != 2 || resp.Cookies[0] != "a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT" || resp.Cookies[1] != "b=2" {
		t.Fatalf("cookies %q, want both Set-Cookie values", resp.Cookies)
	}
	if _, ok := resp.Headers["set-cookie"]; ok || resp.Headers["content-type"] != "application/octet-stream" || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Headers)
	}
}

// TestAnUndecodableEventIsABadRequest: an event API Gateway could not have
// produced (a base64 body that does not decode) is answered as the relay's
// functions answer it, 400 with the protocol's bare bad-request body, not
// by failing the invocation (which API Gateway turns into its own 500 and
// the Errors alarm counts against the function). No store call is made:
// the client points nowhere.
func TestAnUndecodableEventIsABadRequest(t *testing.T) {
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1")})
	st, err := Open(Env{TableName: "unused-table", VerificationURL: "https://site.example/pair"},
		Options{DB: db, Keys: keys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	want := container.BadEvent()
	for _, f := range Functions() {
		if f.Kind != KindHTTP {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			h, err := st.Handler(f.Name)
			if err != nil {
				t.Fatal(err)
			}
			_, path, _ := strings.Cut(f.Route, " ")
			ev := events.APIGatewayV2HTTPRequest{RawPath: strings.Replace(path, "{proxy+}", "enqueue", 1), Body: "%%%", IsBase64Encoded: true}
			ev.RequestContext.HTTP.Method = http.MethodPost
			resp, err := h(context.Background(), ev)
			if err != nil {
				t.Fatalf("the invocation failed (%v): want a 400 answer", err)
			}
			if resp.StatusCode != http.StatusBadRequest || resp.Body != `{"error":"bad-request"}` || resp.Headers["content-type"] != "application/json" {
				t.Fatalf("answer = %+v, want %+v", resp, want)
			}
		})
	}
}

// TestTheSiteTemplateAlarmsOnThePumpsLag: the cloud lane's alarm reads the
// metric the pump writes each cycle, dimensioned by the pump function, and
// a cycle writes a record it reads, late seals counted beside it.
func TestTheSiteTemplateAlarmsOnThePumpsLag(t *testing.T) {
	var tpl struct {
		Resources map[string]struct {
			Type       string         `yaml:"Type"`
			Condition  string         `yaml:"Condition"`
			Properties map[string]any `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &tpl); err != nil {
		t.Fatal(err)
	}
	a, ok := tpl.Resources["SitePumpLagAlarm"]
	if !ok || a.Type != "AWS::CloudWatch::Alarm" || a.Condition != "CloudLane" {
		t.Fatal("site-template.yaml has no SitePumpLagAlarm on the cloud lane")
	}
	p := a.Properties
	if p["Namespace"] != MetricsNamespace || p["MetricName"] != MetricPumpLag {
		t.Fatalf("alarm reads %v/%v, the pump writes %s/%s", p["Namespace"], p["MetricName"], MetricsNamespace, MetricPumpLag)
	}
	dims, _ := p["Dimensions"].([]any)
	d, _ := dims[0].(map[string]any)
	if len(dims) != 1 || d["Name"] != "Function" || d["Value"] != Pump {
		t.Fatalf("alarm dimensions %v, want Function=%s", dims, Pump)
	}
	var buf bytes.Buffer
	writePumpEMF(&buf, sitepump.Cycle{LagMs: 4321, Late: 2}, time.Unix(0, 0))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec[MetricPumpLag] != float64(4321) || rec[MetricLateSeals] != float64(2) || rec["Function"] != Pump {
		t.Fatalf("EMF record %s: %v", buf.String(), err)
	}
}
