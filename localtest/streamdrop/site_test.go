package streamdrop

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// The site processes' environment.
const (
	envRole   = "BYORELAY_STREAMDROP_ROLE" // roleSealer or roleReader
	envSeed   = "BYORELAY_STREAMDROP_SEED"
	envRelay  = "BYORELAY_STREAMDROP_RELAY"
	envDDB    = "BYORELAY_STREAMDROP_DDB"
	envTable  = "BYORELAY_STREAMDROP_TABLE"
	envJob    = "BYORELAY_STREAMDROP_JOB"
	envPrompt = "BYORELAY_STREAMDROP_PROMPT"
	envToken  = "BYORELAY_STREAMDROP_TOKEN"
	envAddr   = "BYORELAY_STREAMDROP_ADDR" // where the reader writes its address

	roleSealer = "sealer"
	roleReader = "reader"
	siteID     = "site-streamdrop"
	jobOwner   = "alice"
)

// openSite is one site process's siteserver on the cloud lane over the
// shared site table.
func openSite() (*siteserver.Server, error) {
	keys, err := peers.SiteKeys(os.Getenv(envSeed))
	if err != nil {
		return nil, err
	}
	st, err := sitedynamo.New(sitedynamo.Config{
		DB:    dynamodb.NewFromConfig(localtest.AWSConfig(os.Getenv(envDDB))),
		Table: os.Getenv(envTable),
	})
	if err != nil {
		return nil, err
	}
	return siteserver.New(siteserver.Config{Store: st, Keys: keys,
		Cloud: &siteserver.CloudLane{RelayURL: os.Getenv(envRelay), SiteID: siteID}})
}

// runSealer publishes the one streaming job and pumps (seals it to the
// device, collects its result) until killed.
func runSealer() error {
	s, err := openSite()
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := s.Enqueue(ctx, siteserver.EnqueueInput{ID: os.Getenv(envJob), Kind: protocol.KindGenerate,
		Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, os.Getenv(envPrompt))), Owner: jobOwner,
		Streaming: true, TTLMs: (10 * time.Minute).Milliseconds()}); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	return errors.Join(errors.New("pumping stopped"), s.Run(ctx, 100*time.Millisecond, func(site.Report) {}))
}

// runReader serves the page and the stream, and never pumps: it seals
// nothing, so every stream it serves was sealed by another process.
func runReader() error {
	s, err := openSite()
	if err != nil {
		return err
	}
	token := os.Getenv(envToken)
	streams, err := s.StreamHandler(func(r *http.Request, jobID string) bool {
		got := r.URL.Query().Get("token")
		return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})
	mux.Handle("GET /stream", streams)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if err := os.WriteFile(os.Getenv(envAddr), []byte(ln.Addr().String()), 0o600); err != nil {
		return err
	}
	// Every answer but a stream closes its connection, so each stream
	// the browser opens comes on a connection of its own, which is what
	// the proxy in front of this process cuts.
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			w.Header().Set("Connection", "close")
		}
		mux.ServeHTTP(w, r)
	}))
}

// page follows ?job= with ?token= by EventSource and records, for the
// test, the text streamed (window.streamed, deltas only), every form the
// answer took and every event in order.
const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>streamdrop</title></head><body>
<div id="answer" style="white-space:pre-wrap"></div>
<p>Status: <span id="status">streaming</span></p>
<script>
const q = new URLSearchParams(location.search);
const answer = document.getElementById('answer'), status = document.getElementById('status');
window.streamed = ''; window.forms = []; window.events = [];
const es = new EventSource('/stream?job=' + encodeURIComponent(q.get('job')) + '&token=' + encodeURIComponent(q.get('token')));
es.onmessage = (m) => {
  const text = JSON.parse(m.data).text;
  window.streamed += text;
  answer.textContent += text;
  window.forms.push(answer.textContent);
  window.events.push('data ' + m.lastEventId);
};
es.onerror = () => { window.events.push('error'); };
es.addEventListener('restart', () => {
  answer.textContent = '';
  window.forms.push(answer.textContent);
  window.events.push('restart');
});
for (const end of ['end', 'stale', 'interrupted', 'absent']) {
  es.addEventListener(end, () => { window.events.push(end); es.close(); status.textContent = end; });
}
es.addEventListener('result', (m) => {
  answer.textContent = JSON.parse(m.data).text;
  window.forms.push(answer.textContent);
  window.events.push('result');
  es.close();
  status.textContent = 'result';
});
</script>
</body></html>
`
