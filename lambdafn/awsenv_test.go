package lambdafn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/controlplane/grants"
	"github.com/byorelay/byorelay/localtest"
)

func TestTheAWSConfigurationComesFromLambdasEnvironment(t *testing.T) {
	cfg, err := awsFromEnv(envOf(map[string]string{
		"AWS_REGION": "eu-west-3", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
	}))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(context.Background())
	if err != nil || cfg.Region != "eu-west-3" || creds.AccessKeyID != "AKID" || creds.SecretAccessKey != "secret" || creds.SessionToken != "token" {
		t.Fatalf("config %+v, credentials %+v, %v", cfg, creds, err)
	}
	if cfg.BaseEndpoint != nil {
		t.Fatalf("an endpoint %q without AWS_ENDPOINT_URL", *cfg.BaseEndpoint)
	}
	for _, missing := range []string{"AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		env := map[string]string{"AWS_REGION": "r", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
		delete(env, missing)
		if _, err := awsFromEnv(envOf(env)); err == nil {
			t.Errorf("a configuration without %s; the first call would fail instead of the start", missing)
		}
	}
	if ep := endpointFor(envOf(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1"}), "dynamodb"); aws.ToString(ep) != "http://127.0.0.1:1" {
		t.Fatalf("dynamodb endpoint %v", ep)
	}
}

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
	if _, err := open(base + "/secure"); err != nil {
		t.Fatalf("SecureString seed: %v", err)
	}
	if _, err := open(base + "/plain"); err == nil || !strings.Contains(err.Error(), "SecureString") {
		t.Fatalf("plain String seed: %v, want a refusal to start", err)
	}
	if _, err := open(base + "/missing"); err == nil {
		t.Fatal("a missing grant key parameter started a function that would pair devices without a key")
	}
}
