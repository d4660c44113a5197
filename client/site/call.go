package site

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// maxResponseBytes bounds what is read from the relay: the largest honest
// answer is a results list of envelopes, each at most 6 MiB, and a site
// pumping often holds few at once.
const maxResponseBytes = 64 << 20

// maxRetryWait is the longest a call waits before trying again. A relay
// asking for longer is telling the caller to come back later, which is the
// caller's schedule (the next Pump), not a goroutine's.
const maxRetryWait = 10 * time.Second

// post signs and sends a site-plane POST and decodes the answer strictly
// into out. Every site-plane write is idempotent (enqueue per job id,
// payload per lease, cancel), so a retryable refusal is asked again.
func (c *Client) post(ctx context.Context, endpoint string, body any, out protocol.Validator) error {
	raw, err := protocol.Encode(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", endpoint, err)
	}
	return c.retry(ctx, func() error {
		return c.do(ctx, http.MethodPost, endpoint, c.relayURL+"/relay/site/"+endpoint, raw, out)
	})
}

// postResults is byorelay's collect: a POST of body to results with the
// query a GET would carry, because a reference relay reads the site from
// the query whatever the method (and answers its plain list).
func (c *Client) postResults(ctx context.Context, body protocol.CollectRequest, out *protocol.CollectResponse) error {
	raw, err := protocol.Encode(body)
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	u := c.relayURL + "/relay/site/results?siteId=" + url.QueryEscape(c.siteID) +
		"&protocolVersion=" + url.QueryEscape(protocol.ProtocolVersion)
	return c.retry(ctx, func() error {
		return c.do(ctx, http.MethodPost, "results", u, raw, out)
	})
}

// get sends a site-plane GET. The version rides in the query, the site id
// in the query and the signed caller slot (the relay refuses the request
// unless they agree), and the signature covers the empty body.
func (c *Client) get(ctx context.Context, endpoint string, out protocol.Validator) error {
	// In the reference's order: siteId, then protocolVersion.
	u := c.relayURL + "/relay/site/" + endpoint + "?siteId=" + url.QueryEscape(c.siteID) +
		"&protocolVersion=" + url.QueryEscape(protocol.ProtocolVersion)
	return c.retry(ctx, func() error {
		return c.do(ctx, http.MethodGet, endpoint, u, nil, out)
	})
}

func (c *Client) retry(ctx context.Context, call func() error) error {
	wait := c.backoff
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil || attempt >= c.attempts || !IsRetryable(err) {
			return err
		}
		var re *RelayError
		if errors.As(err, &re) && re.RetryAfter > wait {
			if re.RetryAfter > maxRetryWait {
				return err
			}
			wait = re.RetryAfter
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return err
		}
		wait *= 2
	}
}

func (c *Client) do(ctx context.Context, method, endpoint, u string, body []byte, out protocol.Validator) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	sig := protocol.SignSiteRequest(c.keys, endpoint, c.siteID, c.clock.Now().UnixMilli(), body)
	sig.SetHeaders(req.Header, protocol.HeaderSite)

	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &networkError{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &networkError{err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return relayErrorFrom(endpoint, resp, data)
	}
	if err := protocol.DecodeStrict(data, out); err != nil {
		return fmt.Errorf("relay %s: answer does not match protocol v%s: %w", endpoint, protocol.ProtocolVersion, err)
	}
	return nil
}
