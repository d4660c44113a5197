// Package awscall makes one SigV4-signed HTTPS request to an AWS service,
// for the few calls a function makes to a service whose SDK client would
// cost more at every cold start than the call itself: an SDK client's
// package initialisation (its schemas and endpoint tables) runs in every
// function that links it, used or not. The signer and HTTP client here are
// the ones the DynamoDB client already links. lambdafn/paramstore (SSM),
// the churn reports (SNS), the sweeper wake-ups (EventBridge Scheduler) and
// lambdafn/objects (the envelope bucket, S3) call through it.
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

// Client sends signed requests to one service's endpoint.
type Client struct {
	service  string
	endpoint string
	region   string
	creds    aws.CredentialsProvider
	http     *http.Client
	signer   *v4.Signer
}

// New is a client for service (the signing name and endpoint prefix, such
// as "ssm" or "sns") in cfg's region with cfg's credentials, at
// Endpoint(cfg, service, endpoint).
func New(cfg aws.Config, service, endpoint string) *Client {
	return &Client{
		service:  service,
		endpoint: strings.TrimSuffix(Endpoint(cfg, service, endpoint), "/"),
		region:   cfg.Region,
		creds:    cfg.Credentials,
		http:     &http.Client{Timeout: 10 * time.Second},
		signer:   v4.NewSigner(),
	}
}

// Endpoint is the URL a service is called at: endpoint when it is not ""
// (a local stand-in), else cfg.BaseEndpoint, else the region's public
// endpoint for the service.
func Endpoint(cfg aws.Config, service, endpoint string) string {
	if endpoint == "" {
		endpoint = aws.ToString(cfg.BaseEndpoint)
	}
	if endpoint == "" {
		endpoint = "https://" + service + "." + cfg.Region + ".amazonaws.com"
		if strings.HasPrefix(cfg.Region, "cn-") {
			endpoint += ".cn"
		}
	}
	return endpoint
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
	return c.Do(ctx, http.MethodPost, path, header, body, maxReply)
}

// Do sends method to a path of the endpoint, escaped already, signed, with
// header set on the request, and reads at most maxReply bytes of the
// answer; an error status is a Reply, as in Post.
//
// S3 signs by its own rules, which Do follows for the "s3" service: the
// payload's hash goes in an X-Amz-Content-Sha256 header (signed with the
// rest), and the path is signed as sent, not escaped a second time.
func (c *Client) Do(ctx context.Context, method, path string, header http.Header, body []byte, maxReply int64) (Reply, error) {
	if c.creds == nil {
		return Reply{}, fmt.Errorf("no credentials")
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, bytes.NewReader(body))
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
	hash := hex.EncodeToString(sum[:])
	s3 := c.service == "s3"
	if s3 {
		req.Header.Set("X-Amz-Content-Sha256", hash)
	}
	if err := c.signer.SignHTTP(ctx, creds, req, hash, c.service, c.region, time.Now(), func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = s3
	}); err != nil {
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
