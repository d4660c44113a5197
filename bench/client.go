package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// client signs and sends protocol requests to one relay origin and times
// each one, from the first byte written to the last byte read: what a
// caller waits, HTTP included, signing and sealing excluded. A client is
// one goroutine's (worker gives each its own over the shared connections):
// every answer is read into the same buffer, valid until the next call.
type client struct {
	origin string
	http   *http.Client
	times  *samples
	// answer is reused for every answer this client reads. A site's
	// results answer lists every result until its deadline, hundreds of
	// kilobytes at the bench's rates; reading each into a fresh buffer
	// grown by doubling was a tenth of the driver's CPU (allocation,
	// clearing, GC), on the cores the targets run on.
	answer bytes.Buffer
}

func newClient(origin string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &client{origin: origin, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}, times: newSamples()}
}

// worker is a client for one more goroutine: the same origin, connections
// and latency samples, an answer buffer of its own.
func (c *client) worker() *client {
	return &client{origin: c.origin, http: c.http, times: c.times}
}

func (c *client) close() { c.http.CloseIdleConnections() }

// statusError is an answer the lifecycle did not expect.
type statusError struct {
	endpoint string
	status   int
	body     string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %.200s", e.endpoint, e.status, e.body)
}

// daemonCall POSTs body to /byollm/endpoint signed by d.
func (c *client) daemonCall(ctx context.Context, d daemon, endpoint string, body any) ([]byte, error) {
	raw, err := protocol.Encode(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.origin+"/byollm/"+endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	protocol.SignRequest(d.keys, endpoint, d.runnerID, time.Now().UnixMilli(), raw).SetHeaders(req.Header, protocol.HeaderRunner)
	return c.send(req, endpoint, true)
}

// siteCall is a site-plane request: enqueue and payload POST body;
// pending and results are GETs signed over the empty body.
func (c *client) siteCall(ctx context.Context, s site, endpoint string, body any) ([]byte, error) {
	return c.siteCallTimed(ctx, s, endpoint, body, true)
}

func (c *client) siteCallTimed(ctx context.Context, s site, endpoint string, body any, timed bool) ([]byte, error) {
	var raw []byte
	method, target := http.MethodPost, c.origin+"/relay/site/"+endpoint
	if endpoint == "pending" || endpoint == "results" {
		method = http.MethodGet
		target += "?" + url.Values{"siteId": {s.id}, "protocolVersion": {protocol.ProtocolVersion}}.Encode()
	} else {
		var err error
		if raw, err = protocol.Encode(body); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	protocol.SignSiteRequest(s.keys, endpoint, s.id, time.Now().UnixMilli(), raw).SetHeaders(req.Header, protocol.HeaderSite)
	return c.send(req, endpoint, timed)
}

func (c *client) send(req *http.Request, endpoint string, timed bool) ([]byte, error) {
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	c.answer.Reset()
	if resp.ContentLength > 0 {
		c.answer.Grow(int(resp.ContentLength))
	}
	_, err = c.answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	body := c.answer.Bytes()
	if timed {
		c.times.add(endpoint, time.Since(start))
	}
	if resp.StatusCode != http.StatusOK {
		return body, &statusError{endpoint: endpoint, status: resp.StatusCode, body: string(body)}
	}
	return body, nil
}
