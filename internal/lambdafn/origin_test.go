package lambdafn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest"
)

// putParameter writes a String parameter to moto's SSM.
func putParameter(t *testing.T, api *ssm.Client, name, value string) {
	t.Helper()
	if _, err := api.PutParameter(context.Background(), &ssm.PutParameterInput{
		Name: aws.String(name), Value: aws.String(value), Type: types.ParameterTypeString, Overwrite: aws.Bool(true),
	}); err != nil {
		t.Fatal(err)
	}
}

// failingSSM stands in for a Parameter Store outage, which moto cannot
// produce: it fails every call while down, and asks moto otherwise.
type failingSSM struct {
	real ParameterGetter
	down bool
}

func (f *failingSSM) Get(ctx context.Context, names ...string) ([]paramstore.Parameter, error) {
	if f.down {
		return nil, errors.New("parameter store unavailable")
	}
	return f.real.Get(ctx, names...)
}

func TestOriginSecretsFollowARotationInParameterStore(t *testing.T) {
	ctx := context.Background()
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	api := ssm.NewFromConfig(cfg)
	name := "/" + localtest.UniqueName("origin-secret")
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	api2 := &failingSSM{real: paramstore.New(cfg, "")}
	log := slog.New(slog.DiscardHandler)

	lock := NewSSMOriginSecrets(api2, name, clk, log)
	if got, err := lock.Secrets(ctx); err == nil {
		t.Fatalf("a lock over a parameter that does not exist answered %q; it must refuse until it has read one", got)
	}
	// Nothing read yet, so an outage refuses too: there are no last values.
	putParameter(t, api, name, "first")
	api2.down = true
	if got, err := lock.Secrets(ctx); err == nil {
		t.Fatalf("a lock that has never read its secret answered %q during an outage", got)
	}
	api2.down = false
	want := func(step string, values ...string) {
		t.Helper()
		got, err := lock.Secrets(ctx)
		if err != nil || !slices.Equal(got, values) {
			t.Fatalf("%s: secrets %q, %v; want %q", step, got, err, values)
		}
	}
	want("start", "first")

	// Rotation: the old value moves to -previous, the new one is written.
	putParameter(t, api, name+PreviousSuffix, "first")
	putParameter(t, api, name, "second")
	want("inside the TTL, the values read last", "first")
	clk.Advance(OriginSecretTTL)
	want("after the TTL, both", "second", "first")

	// The edge now sends the new value; the old one is retired.
	if _, err := api.DeleteParameter(ctx, &ssm.DeleteParameterInput{Name: aws.String(name + PreviousSuffix)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(OriginSecretTTL)
	want("retired", "second")

	// An outage keeps the last values in force rather than locking out the edge.
	api2.down = true
	clk.Advance(OriginSecretTTL)
	want("during an outage", "second")
}

// The deployed wiring: ORIGIN_SECRET_PARAMETER names the parameter, the
// first request reads it, and every relay function refuses a request
// without the secret. Until the parameter can be read, every request is
// refused, with or without a secret.
func TestAnOriginSecretRefusesRequestsAroundTheEdge(t *testing.T) {
	ctx := context.Background()
	moto := localtest.MotoEndpoint(t)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": localtest.DynamoEndpoint(t), "ssm": moto})
	name := "/" + localtest.UniqueName("origin-secret")

	env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": "unused-table", "ORIGIN_SECRET_PARAMETER": name}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(env, Options{Logger: slog.New(slog.DiscardHandler), MetricsOut: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := st.Handler(CatchAll)
	if err != nil {
		t.Fatal(err)
	}
	call := func(headers map[string]string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		ev := events.APIGatewayV2HTTPRequest{RawPath: "/readyz", Headers: headers}
		ev.RequestContext.HTTP.Method = http.MethodGet
		ev.RequestContext.HTTP.Path = "/readyz"
		resp, err := handler(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	secret := map[string]string{strings.ToLower(relay.OriginSecretHeader): "edge-value"}
	if resp := call(secret); resp.StatusCode != 500 || !strings.Contains(resp.Body, `"error":"server-error"`) {
		t.Fatalf("before the parameter exists: %d %s, want 500 server-error", resp.StatusCode, resp.Body)
	}
	putParameter(t, ssm.NewFromConfig(localtest.AWSConfig(moto)), name, "edge-value")
	if resp := call(nil); resp.StatusCode != 403 || !strings.Contains(resp.Body, `"error":"forbidden"`) {
		t.Fatalf("around the edge: %d %s, want 403 forbidden", resp.StatusCode, resp.Body)
	}
	// API Gateway hands headers over lower-cased.
	if resp := call(secret); resp.StatusCode != 404 {
		t.Fatalf("through the edge: %d %s, want the relay's own 404", resp.StatusCode, resp.Body)
	}
}
