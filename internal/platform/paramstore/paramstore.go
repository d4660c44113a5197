// Package paramstore reads SSM Parameter Store parameters (GetParameters,
// decrypted) with the SDK's ssm client, for the keys and secrets a
// function reads on its first request and about once a minute after. The
// client is built by the first read, not by New: a function's init builds
// no client it may not call.
package paramstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// Parameter is one parameter as read, decrypted.
type Parameter struct {
	Name string
	// Type is "String", "StringList" or "SecureString".
	Type  string
	Value string
}

// SecureString is the Type of an encrypted parameter.
const SecureString = "SecureString"

// Client reads parameters.
type Client struct {
	api func() *ssm.Client
}

// New is a client for cfg's region and credentials. endpoint overrides the
// regional endpoint (a local stand-in); "" takes cfg.BaseEndpoint, and
// without that the region's public endpoint.
func New(cfg aws.Config, endpoint string) *Client {
	return &Client{api: sync.OnceValue(func() *ssm.Client {
		return ssm.NewFromConfig(cfg, func(o *ssm.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
		})
	})}
}

// Get reads names (at most ten, SSM's limit for one call), decrypted.
// A name that does not exist is absent from the answer, not an error, as
// in GetParameters itself. A refusal is the SDK's error, wrapped, after
// the SDK's retries of what it retries (throttling, 5xx, a failed
// connection).
func (c *Client) Get(ctx context.Context, names ...string) ([]Parameter, error) {
	out, err := c.api().GetParameters(ctx, &ssm.GetParametersInput{Names: names, WithDecryption: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("paramstore: %w", err)
	}
	found := make([]Parameter, 0, len(out.Parameters))
	for _, p := range out.Parameters {
		found = append(found, Parameter{Name: aws.ToString(p.Name), Type: string(p.Type), Value: aws.ToString(p.Value)})
	}
	return found, nil
}
