package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/byorelay/byorelay/internal/controlplane"
)

// globals are the flags every command takes.
type globals struct {
	endpoint string
	sigv4    bool
	region   string
	token    string
	// json prints the API's answer as it came instead of a table.
	json bool
}

// register adds the global flags to fs, defaulting to what is already
// parsed so a flag given before the command survives the command's parse.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.endpoint, "endpoint", g.endpoint, "")
	fs.BoolVar(&g.sigv4, "sigv4", g.sigv4, "")
	fs.StringVar(&g.region, "region", g.region, "")
	fs.StringVar(&g.token, "token", g.token, "")
	fs.BoolVar(&g.json, "json", g.json, "")
}

// client builds the API client. A deployment's admin route is
// IAM-authorised, so anything that is not loopback is signed: an unsigned
// request there is refused anyway, and a loopback endpoint is the local
// stack, which checks its per-run bearer token instead.
func (g *globals) client(ctx context.Context) (*controlplane.Client, error) {
	if g.endpoint == "" {
		return nil, errors.New("no endpoint: give --endpoint or set " + EnvEndpoint)
	}
	u, err := url.Parse(g.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not an http(s) URL", g.endpoint)
	}
	if !g.sigv4 && isLoopback(u.Hostname()) {
		return controlplane.NewClient(g.endpoint, nil).WithToken(g.token), nil
	}
	region := g.region
	if region == "" {
		region = regionFromHost(u.Hostname())
	}
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no region to sign for: give --region or set AWS_REGION")
	}
	return controlplane.NewClient(g.endpoint, &http.Client{Transport: NewSigV4Transport(nil, cfg.Credentials, cfg.Region)}), nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// regionFromHost reads the region out of an API Gateway or Lambda function
// URL host name: <id>.execute-api.<region>.amazonaws.com,
// <id>.lambda-url.<region>.on.aws.
func regionFromHost(host string) string {
	parts := strings.Split(host, ".")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "execute-api" || parts[i] == "lambda-url" {
			return parts[i+1]
		}
	}
	return ""
}
