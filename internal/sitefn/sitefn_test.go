package sitefn

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/siteserver"
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

func TestEnvNeedsATableAndPositiveDurations(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := LoadEnv(env(map[string]string{})); err == nil {
		t.Error("no TABLE_NAME was accepted")
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
