package container

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// AWSFromEnv is the SDK configuration a Lambda container's environment
// gives: the region (AWS_REGION) and the execution role's credentials
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), which
// Lambda sets for the execution environment's life. The SDK's default
// chain (config.LoadDefaultConfig) finds the same values first, but links
// everything else it could look in (shared files, SSO, STS, IMDS, process
// credentials) into every function: about 1.3 MB of binary and init work
// at every cold start, for sources a Lambda never uses.
func AWSFromEnv(getenv func(string) string) (aws.Config, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		return aws.Config{}, fmt.Errorf("container: AWS_REGION is not set")
	}
	key, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" || secret == "" {
		return aws.Config{}, fmt.Errorf("container: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
	}
	cfg := aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, getenv("AWS_SESSION_TOKEN")),
	}
	if ep := getenv("AWS_ENDPOINT_URL"); ep != "" {
		cfg.BaseEndpoint = aws.String(ep)
	}
	return cfg, nil
}

// EndpointFor is the endpoint override for one service the way the SDK's
// own loader reads it (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_S3, …),
// or nil: the configuration's, then the regional endpoint. The local
// stack, `byorelay invoke` and the tests point functions at DynamoDB Local
// and moto this way.
func EndpointFor(getenv func(string) string, service string) *string {
	if ep := getenv("AWS_ENDPOINT_URL_" + strings.ToUpper(service)); ep != "" {
		return aws.String(ep)
	}
	return nil
}
