package lambdafn

import (
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/relay"
)

// Options are what a caller may inject into Open instead of the defaults a
// Lambda container uses.
type Options struct {
	// AWS is the SDK configuration; nil reads it from the environment
	// Lambda sets (container.AWSFromEnv), with AWS_ENDPOINT_URL_<SERVICE> overrides.
	AWS *aws.Config
	// Clock is the store's and the relay's clock. Nil is the host clock for
	// the relay and, for the store, a ddb.ServerClock over the host
	// clock: every replica's leases and windows read DynamoDB's clock.
	Clock clock.Clock
	// Logger receives the relay's decision records; nil writes JSON to
	// stderr, which Lambda ships to CloudWatch Logs.
	Logger *slog.Logger
	// MetricsOut receives EMF records; nil is stdout, where Lambda's log
	// agent picks EMF up. io.Discard turns metrics off.
	MetricsOut io.Writer
	// RelayMetrics, when set, counts the relay's decisions in place of the
	// EMF records (the local stack counts them into its log); the sweep's
	// and the clock's metrics stay EMF on MetricsOut.
	RelayMetrics relay.Metrics
	// Grants authors grants with a key the caller holds (the local stack's);
	// nil signs with Env.GrantKeyParameter's seed or Env.GrantKMSKeyID's
	// KMS key when one is set.
	Grants *grants.Author
}

// awsConfig is the given configuration, or the environment's; endpoint
// answers a service's endpoint override: the environment's
// AWS_ENDPOINT_URL_<SERVICE> when the configuration came from there, else
// what the client already had.
func awsConfig(given *aws.Config) (cfg aws.Config, endpoint endpointFunc, err error) {
	if given != nil {
		return *given, func(_ string, had *string) *string { return had }, nil
	}
	cfg, err = container.AWSFromEnv(os.Getenv)
	if err != nil {
		return aws.Config{}, nil, err
	}
	return cfg, func(service string, had *string) *string {
		if ep := container.EndpointFor(os.Getenv, service); ep != nil {
			return ep
		}
		return had
	}, nil
}

// endpointFunc answers a service's endpoint override, given the one its
// client already had (awsConfig).
type endpointFunc func(service string, had *string) *string
