package lambdafn

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/paramstore"
)

// grantAuthor is the author over the control-plane key env names: an AWS
// KMS key (GrantKMSKeyID), whose public half it reads, or the seed in an
// SSM parameter (GrantKeyParameter), which it reads. A key that is missing,
// unreadable or of the wrong kind is an error, which the request that
// asked answers 503 (container.Deferred): a relay never pairs a device or
// grants a job without its key.
func grantAuthor(ctx context.Context, cfg aws.Config, endpoint endpointFunc, params *paramstore.Client, env Env, clk clock.Clock) (*grants.Author, error) {
	if env.GrantKMSKeyID != "" {
		// Built here, by the first request that needs it, not at Open: a
		// container that never signs builds no KMS client.
		api := kms.NewFromConfig(cfg, func(o *kms.Options) { o.BaseEndpoint = endpoint("kms", o.BaseEndpoint) })
		signer, err := grants.NewKMSSigner(ctx, api, env.GrantKMSKeyID)
		if err != nil {
			return nil, fmt.Errorf("lambdafn: %w", err)
		}
		return grants.NewWithSigner(signer, grants.Options{Clock: clk}), nil
	}
	found, err := params.Get(ctx, env.GrantKeyParameter)
	if err != nil {
		return nil, fmt.Errorf("lambdafn: read grant key: %w", err)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("lambdafn: grant key parameter %s does not exist", env.GrantKeyParameter)
	}
	seed, err := grants.SeedFromParameter(found[0].Name, found[0].Type, found[0].Value)
	if err != nil {
		return nil, fmt.Errorf("lambdafn: %w", err)
	}
	return grants.New(seed, grants.Options{Clock: clk})
}
