// Package streamdemo is a small web page where a prompt's answer appears
// token by token through the relay: the page posts a prompt, the Go site
// publishes it as a streaming job, and the browser follows the site's SSE
// re-serving of the job's live stream (client/site StreamHandler) until the
// seal. The browser test in localtest/e2e drives it in headless Chromium.
package streamdemo

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

// Handler serves the page at /, publishes prompts at POST /ask (owner is
// the user the jobs are published for) and the streams at /stream. Each
// ask is answered with its job id and a random token; /stream serves a
// job only to a request that presents that job's token (?token=), so a
// job id alone reads nothing.
func Handler(s *site.Client, owner string) http.Handler {
	var mu sync.Mutex
	tokens := map[string]string{}
	streams, err := s.StreamHandler(func(r *http.Request, jobID string) bool {
		mu.Lock()
		want, ok := tokens[jobID]
		mu.Unlock()
		got := r.URL.Query().Get("token")
		return ok && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
	})
	if err != nil {
		panic(err) // an authorize function is passed just above
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})
	mux.HandleFunc("POST /ask", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Prompt string `json:"prompt"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64*1024)).Decode(&in); err != nil || in.Prompt == "" {
			http.Error(w, "a prompt is required", http.StatusBadRequest)
			return
		}
		var b, tok [16]byte
		_, _ = rand.Read(b[:8])
		_, _ = rand.Read(tok[:])
		id := "ask-" + hex.EncodeToString(b[:8])
		token := hex.EncodeToString(tok[:])
		stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owner, Audience: "private",
			Streaming: true, DeadlineAt: time.Now().Add(5 * time.Minute).UnixMilli()}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		if _, err := s.Publish(ctx, stub, protocol.GeneratePayload(in.Prompt)); err != nil {
			http.Error(w, "publish failed: "+err.Error(), http.StatusBadGateway)
			return
		}
		mu.Lock()
		tokens[id] = token
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"job": id, "token": token})
	})
	mux.Handle("GET /stream", streams)
	return mux
}

const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>byorelay live stream</title>
<style>body{font:16px system-ui;margin:2em;max-width:40em}#answer{white-space:pre-wrap;border:1px solid #ccc;padding:1em;min-height:4em}</style>
</head><body>
<h1>Ask, and watch the answer arrive</h1>
<form id="ask"><input id="prompt" size="50" value="tell me something in a few words"> <button id="go">Ask</button></form>
<p>Status: <span id="status">idle</span></p>
<div id="answer"></div>
<script>
document.getElementById('ask').addEventListener('submit', async (e) => {
  e.preventDefault();
  const answer = document.getElementById('answer'), status = document.getElementById('status');
  answer.textContent = ''; status.textContent = 'publishing';
  const r = await fetch('/ask', {method: 'POST', headers: {'content-type': 'application/json'},
    body: JSON.stringify({prompt: document.getElementById('prompt').value})});
  if (!r.ok) { status.textContent = 'failed: ' + await r.text(); return; }
  const {job, token} = await r.json();
  status.textContent = 'streaming';
  const es = new EventSource('/stream?job=' + encodeURIComponent(job) + '&token=' + encodeURIComponent(token));
  es.onmessage = (m) => { answer.textContent += JSON.parse(m.data).text; };
  // The answer restarted (the job is being run again): what is shown goes.
  es.addEventListener('restart', () => { answer.textContent = ''; });
  for (const end of ['end', 'stale', 'interrupted', 'absent']) {
    es.addEventListener(end, () => { es.close(); status.textContent = end === 'end' ? 'done' : end; });
  }
  es.addEventListener('result', (m) => { answer.textContent = JSON.parse(m.data).text; es.close(); status.textContent = 'done'; });
});
</script>
</body></html>
`
