package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// client signs and sends protocol requests to one relay origin and times
// each one, from the first byte written to the last byte read: what a
// caller waits, HTTP included, signing and sealing excluded.
//
// A client is one goroutine's, with one keep-alive HTTP/1.1 connection of
// its own (worker makes one per goroutine), written and read in that
// goroutine. net/http's client hands every request to a writing and a
// reading goroutine of the connection and back; at seven requests a job
// that handing-off was a fifth of the driver's CPU, on the cores the
// targets are measured on. The requests are the same on the wire: the
// method, path, Host, Content-Type and Content-Length, and the signature
// headers.
type client struct {
	origin string // http://host:port
	host   string // host:port
	times  *samples

	conn net.Conn // nil until the first request, and after a failure
	r    *bufio.Reader
	w    *bufio.Writer
	// answer is reused for every answer this client reads, and valid until
	// the next call. A site's results answer lists every result until its
	// deadline, hundreds of kilobytes at the bench's rates; reading each
	// into a fresh buffer grown by doubling was a tenth of the driver's CPU
	// (allocation, clearing, GC).
	answer bytes.Buffer
}

// requestTimeout bounds one request, connection included.
const requestTimeout = 2 * time.Minute

func newClient(origin string) *client {
	return &client{origin: origin, host: strings.TrimPrefix(origin, "http://"), times: newSamples()}
}

// worker is a client for one more goroutine: the same origin and latency
// samples, a connection and an answer buffer of its own.
func (c *client) worker() *client {
	return &client{origin: c.origin, host: c.host, times: c.times}
}

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

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
	sig := protocol.SignRequest(d.keys, endpoint, d.runnerID, time.Now().UnixMilli(), raw)
	return c.send(ctx, http.MethodPost, "/byollm/"+endpoint, protocol.HeaderRunner, sig, raw, endpoint, true)
}

// siteCall is a site-plane request: enqueue and payload POST body;
// pending and results are GETs signed over the empty body.
func (c *client) siteCall(ctx context.Context, s site, endpoint string, body any) ([]byte, error) {
	return c.siteCallTimed(ctx, s, endpoint, body, true)
}

func (c *client) siteCallTimed(ctx context.Context, s site, endpoint string, body any, timed bool) ([]byte, error) {
	var raw []byte
	method, path := http.MethodPost, "/relay/site/"+endpoint
	if endpoint == "pending" || endpoint == "results" {
		method = http.MethodGet
		path += "?" + url.Values{"siteId": {s.id}, "protocolVersion": {protocol.ProtocolVersion}}.Encode()
	} else {
		var err error
		if raw, err = protocol.Encode(body); err != nil {
			return nil, err
		}
	}
	sig := protocol.SignSiteRequest(s.keys, endpoint, s.id, time.Now().UnixMilli(), raw)
	return c.send(ctx, method, path, protocol.HeaderSite, sig, raw, endpoint, timed)
}

// send makes one request on the client's connection and reads the whole
// answer. A request on a kept-alive connection the server has since
// closed is sent once more on a new one, as net/http's client does for a
// request that got no answer at all.
func (c *client) send(ctx context.Context, method, path, callerHeader string, sig protocol.RequestSignature, body []byte, endpoint string, timed bool) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	reused := c.conn != nil
	status, err := c.roundTrip(method, path, callerHeader, sig, body)
	if err != nil && reused && errors.Is(err, errNoAnswer) {
		start = time.Now()
		status, err = c.roundTrip(method, path, callerHeader, sig, body)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	if timed {
		c.times.add(endpoint, time.Since(start))
	}
	answer := c.answer.Bytes()
	if status != http.StatusOK {
		return answer, &statusError{endpoint: endpoint, status: status, body: string(answer)}
	}
	return answer, nil
}

// errNoAnswer is a request whose connection failed before any byte of an
// answer arrived.
var errNoAnswer = errors.New("the connection closed before an answer")

// roundTrip writes the request and reads the answer into c.answer.
func (c *client) roundTrip(method, path, callerHeader string, sig protocol.RequestSignature, body []byte) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.host, requestTimeout)
		if err != nil {
			return 0, err
		}
		c.conn = conn
		if c.r == nil {
			c.r, c.w = bufio.NewReaderSize(conn, 64<<10), bufio.NewWriterSize(conn, 8<<10)
		} else {
			c.r.Reset(conn)
			c.w.Reset(conn)
		}
	}
	if err := c.conn.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return 0, err
	}
	w := c.w
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(c.host)
	w.WriteString("\r\n")
	if body != nil {
		w.WriteString("Content-Type: application/json\r\nContent-Length: ")
		w.WriteString(strconv.Itoa(len(body)))
		w.WriteString("\r\n")
	}
	header := func(name, value string) {
		w.WriteString(http.CanonicalHeaderKey(name))
		w.WriteString(": ")
		w.WriteString(value)
		w.WriteString("\r\n")
	}
	header(callerHeader, sig.CallerID)
	header(protocol.HeaderIssuedAt, strconv.FormatInt(sig.IssuedAt, 10))
	header(protocol.HeaderSignature, sig.Signature)
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		c.close()
		return 0, fmt.Errorf("%w: %v", errNoAnswer, err)
	}
	if _, err := c.r.Peek(1); err != nil {
		c.close()
		return 0, fmt.Errorf("%w: %v", errNoAnswer, err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	c.answer.Reset()
	if resp.ContentLength > 0 {
		c.answer.Grow(int(resp.ContentLength))
	}
	_, err = c.answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, nil
}
