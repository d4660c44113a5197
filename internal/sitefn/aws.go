package sitefn

import (
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/objects"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
)

// awsDefaults fills what o leaves unset from Lambda's environment: the
// configuration it gives, with AWS_ENDPOINT_URL_<SERVICE> overrides (not
// the SDK's config loader, which links every other source of credentials
// into every function, as lambdafn builds the relay's), the DynamoDB and
// S3 clients, and, for a stack that serves, the parameter store the keys
// are read from by internal/platform/paramstore's ssm client, built by the
// first read. cfg is the zero config when o needed none of it.
func awsDefaults(env Env, o Options, serve bool) (Options, aws.Config, *paramstore.Client, error) {
	var cfg aws.Config
	if o.DB != nil && (!serve || o.Keys != nil) && (o.Objects != nil || env.BucketName == "") &&
		(!env.Cloud() || (o.Starter != nil && o.Waker != nil)) {
		return o, cfg, nil, nil
	}
	cfg, err := container.AWSFromEnv(os.Getenv)
	if err != nil {
		return o, cfg, nil, fmt.Errorf("sitefn: AWS config: %w", err)
	}
	if o.DB == nil {
		o.DB = dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
			if ep := container.EndpointFor(os.Getenv, "dynamodb"); ep != nil {
				do.BaseEndpoint = ep
			}
		})
	}
	if o.Objects == nil && env.BucketName != "" {
		// Built by its first call: most containers never offload.
		o.Objects = objects.New(cfg, aws.ToString(container.EndpointFor(os.Getenv, "s3")), env.BucketName, env.S3PathStyle)
	}
	var params *paramstore.Client
	if serve && o.Keys == nil {
		if env.SiteKeysParameter == "" {
			return o, cfg, nil, errors.New("sitefn: SITE_KEYS_PARAMETER is required (the site's keys are supplied, never generated per container)")
		}
		params = paramstore.New(cfg, aws.ToString(container.EndpointFor(os.Getenv, "ssm")))
	}
	return o, cfg, params, nil
}
