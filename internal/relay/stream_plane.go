package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// maxStreamBody bounds a stream-lane body: one sealed frame and a few ids.
const maxStreamBody = 64 * 1024

// streamLane is the live-stream lane's endpoint for each of its exact
// paths. Its bodies are held to maxStreamBody and to the handshake like
// every protocol path's (readBody). A relay with no stream log answers
// either path 501 before reading anything.
var streamLane = map[string]endpoint{
	seal.StreamAppendPath: streamsServed(authed(authDaemon[seal.AppendFrameRequest], (*Relay).streamAppend)),
	seal.StreamAttachPath: streamsServed(authed(authSite[seal.AttachRequest], (*Relay).streamPoll)),
}

func streamsServed(handle endpoint) endpoint {
	return func(r *Relay, c *call, q *request) (reply, error) {
		if _, served := r.streamLog(); !served {
			return streamsOff, nil
		}
		return handle(r, c, q)
	}
}

// sseHeaders are rindle's STREAM_SSE_HEADERS.
var sseHeaders = map[string]string{
	"Content-Type":      "text/event-stream; charset=utf-8",
	"Cache-Control":     "no-cache, no-transform",
	"Connection":        "keep-alive",
	"X-Accel-Buffering": "no",
}

// HTTPHandler serves the relay straight over net/http: what `byorelay
// serve --store memory` runs, the bench's memory target and the tests that
// want a real relay on a loopback URL. POST /byorelay/stream/attach is
// served as Server-Sent Events when the caller accepts text/event-stream
// (as a Lambda function URL in RESPONSE_STREAM mode and the local API
// server serve it), and every other request through Handle, buffered, the
// body read up to one byte past MaxBodyBytes so an oversized one is
// refused with the protocol's error rather than cut short. The attach is authorised exactly as the
// long-poll is, before anything about the job is read; a refusal is the
// ordinary JSON error body. Last-Event-ID, when present, takes precedence
// over the body's from (rindle: the URL holds where the reader joined, the
// header where it got to).
func (r *Relay) HTTPHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		raw, err := io.ReadAll(io.LimitReader(hr.Body, MaxBodyBytes+1))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if hr.URL.Path != seal.StreamAttachPath || hr.Method != http.MethodPost || !acceptsSSE(hr.Header) {
			resp := r.Handle(hr.Context(), Request{Method: hr.Method, Path: hr.URL.Path, RawQuery: hr.URL.RawQuery,
				Header: hr.Header, Body: raw, SourceIP: peerAddress(hr.RemoteAddr)})
			writeResponse(w, resp) // writes the body out before it returns
			recycle(resp.Body)
			return
		}
		r.serveSSE(w, hr, raw)
	})
}

// peerAddress is the connection's peer, the address a plain net/http
// relay knows its caller by (the pairing throttle's per-source bucket):
// never a forwarding header, which the caller writes.
func peerAddress(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// AttachHandler is HTTPHandler for the attach alone: what the deployed
// attach function (a Lambda function URL, RESPONSE_STREAM) serves. Every
// other path answers 404 not-found after the origin lock, without reading
// anything: that function's role may only read the table, and its URL is
// not the relay's, so no v2 endpoint or append is served there.
func (r *Relay) AttachHandler() http.Handler {
	h := r.HTTPHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		if hr.URL.Path == seal.StreamAttachPath {
			h.ServeHTTP(w, hr)
			return
		}
		c := &call{ctx: hr.Context(), method: hr.Method, path: hr.URL.Path, endpoint: "attach"}
		rep, admitted, err := r.checkOrigin(c, protocol.CanonicalHeader(hr.Header))
		switch {
		case err != nil:
			rep = serverError
		case admitted:
			rep = bare(http.StatusNotFound, protocol.CodeNotFound)
		}
		resp, _ := encode(rep)
		writeResponse(w, resp)
	})
}

// boxed is ctx bounded by wait and by the host's own deadline less a
// margin: a Lambda function's deadline is its timeout, and a long-poll or
// an SSE window that ran into it would be killed mid-answer (a 5xx for the
// long-poll, a truncated event for SSE) instead of closing cleanly. Pacing
// from the process's clock: it decides when to stop talking, not what is
// true.
func boxed(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	const margin = 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(0, min(wait, time.Until(dl)-margin))
	}
	return context.WithTimeout(ctx, wait)
}

func acceptsSSE(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		if bytes.Contains([]byte(v), []byte("text/event-stream")) {
			return true
		}
	}
	return false
}

func writeResponse(w http.ResponseWriter, resp Response) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	// The length up front, as API Gateway and Lambda send it: without it
	// net/http chunks any answer past 2 KB (a results listing is hundreds).
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func (r *Relay) serveSSE(w http.ResponseWriter, hr *http.Request, raw []byte) {
	header := protocol.CanonicalHeader(hr.Header)
	c := &call{ctx: hr.Context(), requestID: requestID(hr.Context(), header), method: hr.Method, path: hr.URL.Path, endpoint: "attach"}
	req, refusal := r.admitSSE(c, hr, header, raw)
	if refusal != nil {
		resp, err := encode(*refusal)
		if err != nil {
			resp, _ = encode(serverError)
		}
		writeResponse(w, resp)
		return
	}
	for k, v := range sseHeaders {
		w.Header().Set(k, v)
	}
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var mu sync.Mutex
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := w.Write(b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	_ = write(nil)

	ctx, cancel := boxed(c.ctx, r.streamOpts().SSEWindow)
	// rindle's keep-alive comment, so proxies keep a quiet stream open.
	// Stopped and waited for before returning, in that order: nothing may
	// write after the handler, and a pinger left waiting on the window
	// would hold a finished stream (a terminal said) open until the window
	// closed, billed all the while.
	var pinger sync.WaitGroup
	pinger.Add(1)
	defer func() {
		cancel()
		pinger.Wait()
	}()
	go func() {
		defer pinger.Done()
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if write([]byte(": ping\n\n")) != nil {
					cancel()
					return
				}
			}
		}
	}()
	err := r.follow(ctx, req, func(e seal.Event) error { return write(sseEvent(e)) }, false)
	if err != nil && ctx.Err() == nil {
		r.decide(c, "stream-attach-failed", slogError(err))
	}
	// The window closing ends the body without a terminal: EventSource
	// reconnects with Last-Event-ID, which is the point.
}

// admitSSE is what an SSE attach passes before its stream starts: the
// attach request, with the reader's resume point; a non-nil *reply is the
// refusal, answered as the ordinary JSON error body.
func (r *Relay) admitSSE(c *call, hr *http.Request, header http.Header, raw []byte) (seal.AttachRequest, *reply) {
	// The origin lock before anything else, as Handle has it: deployed,
	// this is a function URL anyone can reach past the edge.
	if rep, admitted, err := r.checkOrigin(c, header); err != nil || !admitted {
		if err != nil {
			rep = serverError
		}
		return seal.AttachRequest{}, &rep
	}
	if _, ok := r.streamLog(); !ok {
		rep := streamsOff
		return seal.AttachRequest{}, &rep
	}
	q := &request{raw: raw, header: header, query: hr.URL.Query()}
	if rep := r.readBody(c, q, true); rep != nil {
		return seal.AttachRequest{}, rep
	}
	_, req, refusal, err := authSite[seal.AttachRequest](r, c, q)
	if err != nil {
		rep := serverError
		return seal.AttachRequest{}, &rep
	}
	if refusal != nil {
		return seal.AttachRequest{}, refusal
	}
	if id := hr.Header.Get("Last-Event-ID"); id != "" {
		// parseInt semantics: non-numeric or negative reads as 0.
		if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > 0 {
			req.From = n
		} else {
			req.From = 0
		}
	}
	return req, nil
}

// sseEvent is one SSE event: id is the reader's resume point after it
// (a sealed chunk's end offset; a clear frame's rindle resume point).
func sseEvent(e seal.Event) []byte {
	data, _ := json.Marshal(e)
	var b bytes.Buffer
	id, has := int64(0), false
	switch {
	case e.Sealed != nil && e.Sealed.Kind == seal.KindChunk:
		id, has = e.Sealed.Seq, true
	case e.Clear != nil:
		id, has = e.Clear.ResumePoint()
	}
	if has {
		b.WriteString("id: " + strconv.FormatInt(id, 10) + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}
