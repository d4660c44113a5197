package lambdafn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/controlplane/grants"
	"github.com/byorelay/byorelay/localtest"
)

// GRANT_KEY_PARAMETER through the deployed wiring: the seed read from
// moto's SSM by the signed call, as a container reads it at start. A
// plain String parameter or a missing one stops the start.
func TestAFunctionReadsItsGrantKeyFromASecureStringAtStart(t *testing.T) {
	ctx := context.Background()
	moto := localtest.MotoEndpoint(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "local")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", localtest.DynamoEndpoint(t))
	t.Setenv("AWS_ENDPOINT_URL_SSM", moto)
	sdk := ssm.NewFromConfig(localtest.AWSConfig(moto))
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	base := "/" + localtest.UniqueName("grant-key")
	for name, typ := range map[string]types.ParameterType{"/secure": types.ParameterTypeSecureString, "/plain": types.ParameterTypeString} {
		if _, err := sdk.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(base + name), Value: aws.String(grants.EncodeSeed(seed)), Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	open := func(param string) (*Stack, error) {
		env, err := LoadEnv(envOf(map[string]string{"TABLE_NAME": "unused-table", "GRANT_KEY_PARAMETER": param}))
		if err != nil {
			t.Fatal(err)
		}
		return Open(ctx, env, Options{Logger: slog.New(slog.DiscardHandler), MetricsOut: io.Discard})
	}
	st, err := open(base + "/secure")
	if err != nil {
		t.Fatalf("SecureString seed: %v", err)
	}
	// It read DynamoDB's clock while it waited on SSM, with no request
	// served: the first request finds it read, or waits for that read.
	for start := time.Now(); !st.serverClock.Reading().Calibrated; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("a container that read SSM at start did not read DynamoDB's clock in that wait")
		}
	}
	if _, err := open(base + "/plain"); err == nil || !strings.Contains(err.Error(), "SecureString") {
		t.Fatalf("plain String seed: %v, want a refusal to start", err)
	}
	if _, err := open(base + "/missing"); err == nil {
		t.Fatal("a missing grant key parameter started a function that would pair devices without a key")
	}
}
