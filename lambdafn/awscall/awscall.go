// Package awscall makes one SigV4-signed HTTPS POST to an AWS service, for
// the few calls a function makes to a service whose SDK client would cost
// more at every cold start than the call itself: an SDK client's package
// initialisation (its schemas and endpoint tables) runs in every function
// that links it, used or not. The signer and HTTP client here are the ones
// the DynamoDB client already links. lambdafn/paramstore (SSM), the churn
// reports (SNS) and the sweeper wake-ups (EventBridge Scheduler) call
// through it.
package awscall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Client posts signed requests to one service's endpoint.
type Client struct {
	service  string
	endpoint string
	region   string
	creds    aws.CredentialsProvider
	http     *http.Client
	signer   *v4.Signer
}

// New is a client for service (the signing name and endpoint prefix, such
// as "ssm" or "sns") in cfg's region with cfg's credentials. endpoint
// overrides the regional endpoint (a local stand-in); "" takes
// cfg.BaseEndpoint, and without that the region's public endpoint.
func New(cfg aws.Config, service, endpoint string) *Client {
	if endpoint == "" {
		endpoint = aws.ToString(cfg.BaseEndpoint)
	}
	if endpoint == "" {
		endpoint = "https://" + service + "." + cfg.Region + ".amazonaws.com"
		if strings.HasPrefix(cfg.Region, "cn-") {
			endpoint += ".cn"
		}
	}
	return &Client{
		service:  service,
		endpoint: strings.TrimSuffix(endpoint, "/"),
		region:   cfg.Region,
		creds:    cfg.Credentials,
		http:     &http.Client{Timeout: 10 * time.Second},
		signer:   v4.NewSigner(),
	}
}

// Reply is the service's answer, whatever its status.
type Reply struct {
	// Status is the HTTP status line's text ("400 Bad Request").
	Status     string
	StatusCode int
	Body       []byte
}

// Post sends body to the endpoint's root, signed, with header set on the
// request (Content-Type, and X-Amz-Target for a JSON-protocol service), and
// reads at most maxReply bytes of the answer. An answer with an error
// status is a Reply, not an error: each protocol says its errors its own
// way, and the caller reads them.
func (c *Client) Post(ctx context.Context, header http.Header, body []byte, maxReply int64) (Reply, error) {
	return c.PostPath(ctx, "/", header, body, maxReply)
}

// PostPath is Post to a path of the endpoint, for a REST-protocol service
// whose operation is named by its path (EventBridge Scheduler's
// CreateSchedule is POST /schedules/{Name}). path must be escaped already.
func (c *Client) PostPath(ctx context.Context, path string, header http.Header, body []byte, maxReply int64) (Reply, error) {
	if c.creds == nil {
		return Reply{}, fmt.Errorf("no credentials")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint+path, bytes.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return Reply{}, fmt.Errorf("credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), c.service, c.region, time.Now()); err != nil {
		return Reply{}, fmt.Errorf("sign: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: resp.Status, StatusCode: resp.StatusCode, Body: raw}, nil
}
