package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
)

// GRANT_KEY_PARAMETER through the deployed wiring. A container starts
// without reading it; its first request reads the seed from moto's SSM
// (internal/platform/paramstore), and a device approved after that is handed that seed's
// key. While the key cannot be read (the parameter is missing, or is a
// plain String: a seed in the clear), every request is answered 503 and
// none reaches the relay, and a request after the parameter is fixed reads
// it again and is served.
func TestGrantKeyIsReadFromASecureStringOnFirstRequest(t *testing.T) {
	ctx := context.Background()
	ddb, moto := localtest.DynamoEndpoint(t), localtest.MotoEndpoint(t)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "ssm": moto})
	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := "grantkey-" + time.Now().Format("150405.000000")
	if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
		t.Fatal(err)
	}
	sdk := ssm.NewFromConfig(localtest.AWSConfig(moto))
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	want, err := grants.New(seed, grants.Options{})
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, typ types.ParameterType) {
		t.Helper()
		if _, err := sdk.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(grants.EncodeSeed(seed)),
			Type: typ, Overwrite: aws.Bool(true)}); err != nil {
			t.Fatal(err)
		}
	}
	base := "/" + localtest.UniqueName("grant-key")
	put(base+"/plain", types.ParameterTypeString)

	var logs bytes.Buffer
	open := func(param string) func(body any) (events.APIGatewayV2HTTPResponse, int) {
		t.Helper()
		env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": table, "GRANT_KEY_PARAMETER": param, "VERIFICATION_URL": "https://relay.example/approve"}))
		if err != nil {
			t.Fatal(err)
		}
		st, err := Open(env, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), MetricsOut: io.Discard})
		if err != nil {
			t.Fatalf("%s: Open read the key at start, or failed for want of it: %v", param, err)
		}
		pair, err := st.Handler(Pair)
		if err != nil {
			t.Fatal(err)
		}
		// pair answers one pairing request, and the pending pairings stored
		// after it.
		return func(body any) (events.APIGatewayV2HTTPResponse, int) {
			t.Helper()
			b, err := protocol.Encode(body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := pair(ctx, eventOf(t, relay.Request{Method: http.MethodPost, Path: "/byollm/pair",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: b}))
			if err != nil {
				t.Fatal(err)
			}
			pending, err := st.Store.ListPairings(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			return resp, len(pending)
		}
	}
	start := protocol.PairStartRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "start",
		Daemon: protocol.DaemonInfo{Version: "0.1.1", Label: "grant key test", Platform: "linux"},
		Device: world.Daemon.Public(), Capabilities: []protocol.Capability{}}

	for _, c := range []struct{ param, logged string }{
		{base + "/missing", "does not exist"},
		{base + "/plain", "SecureString"},
	} {
		logs.Reset()
		resp, pending := open(c.param)(start)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Body, `"error":"server-error"`) || pending != 0 {
			t.Fatalf("%s: %d %s with %d pairings stored; want 503 server-error and nothing stored", c.param, resp.StatusCode, resp.Body, pending)
		}
		if !strings.Contains(logs.String(), c.logged) {
			t.Errorf("%s: the log does not say why (%q):\n%s", c.param, c.logged, logs.String())
		}
	}

	// The parameter fixed after the container started: the next request
	// reads it, and the device, approved in the demo projection, is handed
	// the key of that seed.
	put(base+"/secure", types.ParameterTypeSecureString)
	pair := open(base + "/secure")
	resp, _ := pair(start)
	var started protocol.PairStartResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &started) != nil {
		t.Fatalf("start: %d %s", resp.StatusCode, resp.Body)
	}
	resp, _ = pair(protocol.PairPollRequest{ProtocolVersion: protocol.ProtocolVersion, Action: "poll", DeviceCode: started.DeviceCode})
	var polled struct{ Status, ControlPlanePublic string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &polled) != nil || polled.Status != protocol.PairApproved {
		t.Fatalf("poll: %d %s, want approved", resp.StatusCode, resp.Body)
	}
	if polled.ControlPlanePublic != want.Public() {
		t.Fatalf("the device was handed control-plane key %q, want the parameter's %q", polled.ControlPlanePublic, want.Public())
	}
}
