package container

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestTheAWSConfigurationComesFromLambdasEnvironment(t *testing.T) {
	cfg, err := AWSFromEnv(envOf(map[string]string{
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
		if _, err := AWSFromEnv(envOf(env)); err == nil {
			t.Errorf("a configuration without %s; the first call would fail instead of the start", missing)
		}
	}
	if ep := EndpointFor(envOf(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1"}), "dynamodb"); aws.ToString(ep) != "http://127.0.0.1:1" {
		t.Fatalf("dynamodb endpoint %v", ep)
	}
}
