package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// JobView is what the page is told about a job: its state and, once it
// has ended, the answer or why there is none.
type JobView struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Done is set once the state cannot change again.
	Done   bool   `json:"done"`
	Answer string `json:"answer,omitempty"`
	Error  string `json:"error,omitempty"`
	// Waiting says why a queued job has not started, when the site knows
	// (siteserver.Waiting).
	Waiting string `json:"waiting,omitempty"`
}

// Lane is what this web backend needs of the site app, whichever lane
// carries the work: enqueue a prompt for the signed-in person, read a
// job back, and hear when it changes.
type Lane interface {
	Ask(ctx context.Context, owner, prompt string) (jobID string, err error)
	// View is false for a job that does not exist or is not owner's.
	View(ctx context.Context, owner, jobID string) (JobView, bool, error)
	// Subscribe calls onChange after the job may have changed. It must not
	// block.
	Subscribe(jobID string, onChange func()) (unsubscribe func())
}

// MaxPromptBytes bounds what the page may ask: the example's own limit,
// far under the protocol's envelope ceiling.
const MaxPromptBytes = 8 << 10

//go:embed page.html
var page []byte

// Web is the site's web backend. Owner stands in for the signed-in
// person: a real site takes it from its session, never from the request.
type Web struct {
	Lane  Lane
	Owner string
	// Pair, when set, approves a pairing code for Owner (the direct lane,
	// where this site is what daemons pair with).
	Pair func(ctx context.Context, userCode, owner string) (runnerID string, err error)
	// Live, when set, serves GET /live?job=<id>: the answer's text as it
	// is produced (site.Client.StreamHandler, authorised for Owner).
	Live http.Handler
}

// Handler serves the page and its JSON and SSE endpoints.
func (w *Web) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Header().Set("Cache-Control", "no-store")
		_, _ = rw.Write(page)
	})
	mux.HandleFunc("GET /config", func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]any{"owner": w.Owner, "pairing": w.Pair != nil, "live": w.Live != nil})
	})
	mux.HandleFunc("POST /ask", w.ask)
	mux.HandleFunc("GET /jobs/{id}", w.job)
	mux.HandleFunc("GET /jobs/{id}/events", w.events)
	if w.Pair != nil {
		mux.HandleFunc("POST /pair", w.pair)
	}
	if w.Live != nil {
		mux.Handle("GET /live", w.Live)
	}
	return mux
}

func (w *Web) ask(rw http.ResponseWriter, r *http.Request) {
	var in struct {
		Prompt string `json:"prompt"`
	}
	if err := decode(r, &in); err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	prompt := strings.TrimSpace(in.Prompt)
	if prompt == "" || len(prompt) > MaxPromptBytes || !utf8.ValidString(prompt) {
		writeError(rw, http.StatusBadRequest, fmt.Sprintf("a prompt is 1 to %d bytes of text", MaxPromptBytes))
		return
	}
	id, err := w.Lane.Ask(r.Context(), w.Owner, prompt)
	if err != nil {
		writeError(rw, http.StatusBadGateway, "the site could not enqueue the prompt: "+err.Error())
		return
	}
	writeJSON(rw, http.StatusOK, map[string]string{"id": id})
}

// job is the page's fallback: one read, for a browser whose event stream
// keeps failing.
func (w *Web) job(rw http.ResponseWriter, r *http.Request) {
	v, found, err := w.Lane.View(r.Context(), w.Owner, r.PathValue("id"))
	switch {
	case err != nil:
		writeError(rw, http.StatusBadGateway, err.Error())
	case !found:
		writeError(rw, http.StatusNotFound, "no such job")
	default:
		writeJSON(rw, http.StatusOK, v)
	}
}

// events streams the job's state as server-sent events: one "state" event
// each time it changes, the last one with done set, then the stream ends.
func (w *Web) events(rw http.ResponseWriter, r *http.Request) {
	flusher, ok := rw.(http.Flusher)
	if !ok {
		writeError(rw, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	id := r.PathValue("id")
	// Subscribe before the first read, so a change between the read and
	// the wait is not missed. Nothing else re-reads: the store's Subscribe
	// hears every write to the job (on DynamoDB, every process's, through
	// the table's stream), so a timer would only cost reads.
	changed := make(chan struct{}, 1)
	unsubscribe := w.Lane.Subscribe(id, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()

	v, found, err := w.Lane.View(r.Context(), w.Owner, id)
	if err != nil || !found {
		writeError(rw, http.StatusNotFound, "no such job")
		return
	}
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-store")
	var last JobView
	for {
		if v != last {
			data, _ := json.Marshal(v)
			if _, err := fmt.Fprintf(rw, "event: state\ndata: %s\n\n", data); err != nil {
				return
			}
			flusher.Flush()
			last = v
		}
		if v.Done {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
		if v, found, err = w.Lane.View(r.Context(), w.Owner, id); err != nil || !found {
			return // the page falls back to polling, which says what it finds
		}
	}
}

func (w *Web) pair(rw http.ResponseWriter, r *http.Request) {
	var in struct {
		Code string `json:"code"`
	}
	if err := decode(r, &in); err != nil || strings.TrimSpace(in.Code) == "" {
		writeError(rw, http.StatusBadRequest, "a pairing code is required")
		return
	}
	runner, err := w.Pair(r.Context(), strings.TrimSpace(in.Code), w.Owner)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(rw, http.StatusOK, map[string]string{"runnerId": runner})
}

// decode reads a small JSON body strictly. Only application/json is
// accepted: a form on another site cannot send it without a preflight.
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return errors.New("send application/json")
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 2*MaxPromptBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}

func writeError(rw http.ResponseWriter, status int, msg string) {
	writeJSON(rw, status, map[string]string{"error": msg})
}
