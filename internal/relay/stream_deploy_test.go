package relay_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/stream/seal"
)

// httpRequest is req as an HTTP request to base.
func httpRequest(t *testing.T, base string, req relay.Request, accept string) *http.Request {
	t.Helper()
	hr, err := http.NewRequest(http.MethodPost, base+req.Path, bytes.NewReader(req.Body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header = req.Header.Clone()
	if accept != "" {
		hr.Header.Set("Accept", accept)
	}
	return hr
}

// The attach function's handler, deployed as a function URL anyone can
// reach: the origin lock comes first on every path (SSE included), and
// nothing but the attach is served there.
func TestTheAttachHandlerIsOriginLockedAndAttachOnly(t *testing.T) {
	w := newStreamWorld(t, factories[0])
	cfg := w.cfg
	cfg.OriginSecrets = relay.FixedOriginSecrets("edge-secret")
	locked, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(locked.AttachHandler())
	defer srv.Close()
	w.push("hello")

	attach := w.attachReq(w.site, "job-1", 0)
	appendReq := w.appendReq(seal.Frame{N: 1, From: 5, Seq: 5, Kind: seal.KindEnd, CT: "x"})
	cases := []struct {
		name   string
		req    relay.Request
		accept string
		status int
		body   string
	}{
		{"an SSE attach without the edge's secret", attach, "text/event-stream", 403, edgeOnly},
		{"a long-poll attach without it", attach, "application/json", 403, edgeOnly},
		{"an append without it", appendReq, "application/json", 403, edgeOnly},
		{"an append through the edge", through(appendReq, "edge-secret"), "application/json", 404, `{"error":"not-found"}`},
		{"a claim through the edge", through(w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1)), "edge-secret"), "", 404, `{"error":"not-found"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(httpRequest(t, srv.URL, c.req, c.accept))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status || string(body) != c.body {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, body, c.status, c.body)
			}
		})
	}
	// Nothing the refused append carried reached the log.
	if _, got := w.poll("", 0); len(got.Events) != 3 || got.Done {
		t.Fatalf("after the refusals: %+v (want open, one frame, durable)", got.Events)
	}

	t.Run("an SSE attach through the edge", func(t *testing.T) {
		resp, err := http.DefaultClient.Do(httpRequest(t, srv.URL, through(attach, "edge-secret"), "text/event-stream"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		buf := make([]byte, 4096)
		var got strings.Builder
		for !strings.Contains(got.String(), `"sealed"`) {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				t.Fatalf("body ended before the frame: %v: %s", err, got.String())
			}
		}
	})
}

// A long-poll answers before its host's deadline, whatever LongPollWait
// says: in a Lambda function whose timeout is shorter than the wait, an
// answer at the wait would be a killed invocation and a 5xx.
func TestALongPollAnswersBeforeItsHostsDeadline(t *testing.T) {
	w := newStreamWorld(t, factories[0])
	cfg := w.cfg
	cfg.Streams.LongPollWait = time.Hour
	patient, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp := patient.Handle(ctx, w.attachReq(w.site, "job-1", 0))
	if ctx.Err() != nil {
		t.Fatal("the long-poll ran into its host's deadline")
	}
	expect(t, resp, 200, `{"events":[],"done":false}`)
}

// An SSE response ends with its terminal: the keep-alive does not hold a
// finished stream open until the window closes (a Lambda billed for an
// hour here, had the window been an hour).
func TestAnSSEResponseEndsWithItsTerminal(t *testing.T) {
	w := newStreamWorld(t, factories[0])
	cfg := w.cfg
	cfg.Streams.SSEWindow = time.Hour
	patient, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(patient.AttachHandler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(httpRequest(t, srv.URL, w.attachReq(w.site, "no-such-job", 0), "text/event-stream").WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the body did not end with its terminal: %v (read %q)", err, body)
	}
	if string(body) != "data: {\"type\":\"absent\"}\n\n" {
		t.Fatalf("body %q", body)
	}
}
