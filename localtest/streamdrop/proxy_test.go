package streamdrop

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// dropProxy is a TCP proxy in front of the reader process. The first
// `cuts` connections that ask for /stream are closed from the server side
// once `budget` bytes of their response body have been passed on: a real
// TCP close in the middle of the event stream (usually in the middle of
// an event), which the browser sees as a lost connection. Every other
// connection is passed through untouched.
type dropProxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	budget int
	cuts   int

	mu      sync.Mutex
	streams []streamConn
}

// streamConn is what the proxy saw of one /stream request.
type streamConn struct {
	lastEventID string // the request's Last-Event-ID header
	cut         bool
	body        string // the response body passed on (chunked framing and all)
}

func startProxy(t *testing.T, target string, budget, cuts int) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{t: t, ln: ln, target: target, budget: budget, cuts: cuts}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *dropProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) seen() []streamConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]streamConn(nil), p.streams...)
}

func (p *dropProxy) handle(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	// The request head, passed on as read.
	br := bufio.NewReader(c)
	var head bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	if _, err := up.Write(head.Bytes()); err != nil {
		return
	}
	go func() { _, _ = io.Copy(up, br) }()
	lines := strings.Split(head.String(), "\r\n")
	if !strings.HasPrefix(lines[0], "GET /stream?") {
		_, _ = io.Copy(c, up)
		return
	}
	var lastID string
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Last-Event-ID") {
			lastID = strings.TrimSpace(v)
		}
	}
	p.mu.Lock()
	i := len(p.streams)
	cut := i < p.cuts
	p.streams = append(p.streams, streamConn{lastEventID: lastID})
	p.mu.Unlock()

	// Pass the response on, counting its body's bytes after the head.
	var resp, body bytes.Buffer
	buf := make([]byte, 4096)
	inBody := false
	for {
		n, err := up.Read(buf)
		chunk := buf[:n]
		if !inBody {
			resp.Write(chunk)
			if k := bytes.Index(resp.Bytes(), []byte("\r\n\r\n")); k >= 0 {
				inBody = true
				headLen := k + 4
				chunk = resp.Bytes()[headLen:]
				if _, werr := c.Write(resp.Bytes()[:headLen]); werr != nil {
					return
				}
			} else {
				chunk = nil
			}
		}
		if inBody && len(chunk) > 0 {
			if cut && body.Len()+len(chunk) >= p.budget {
				chunk = chunk[:p.budget-body.Len()]
				_, _ = c.Write(chunk)
				body.Write(chunk)
				p.mu.Lock()
				p.streams[i].cut, p.streams[i].body = true, body.String()
				p.mu.Unlock()
				return // both connections close here, from the server's side
			}
			if _, werr := c.Write(chunk); werr != nil {
				return
			}
			body.Write(chunk)
			p.mu.Lock()
			p.streams[i].body = body.String()
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}
