package peers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Model is a stand-in model server speaking the two calls of the OpenAI
// chat API that byollm's openai-http backend makes: GET /v1/models (its
// health probe; the daemon claims nothing unless the configured model is
// listed) and POST /v1/chat/completions. It answers Answer(prompt) and
// records every prompt it was asked.
type Model struct {
	// Name is the one model listed; the daemon must be configured with it.
	Name string
	// URL is the base URL to configure as the backend's baseUrl (…/v1).
	URL string

	mu      sync.Mutex
	prompts []string
}

// Answer is what the stand-in model says to a prompt.
func Answer(prompt string) string { return "stand-in answer to: " + prompt }

// NewModel serves a stand-in model on loopback until the test ends.
func NewModel(t testing.TB, name string) *Model {
	t.Helper()
	m := &Model{Name: name}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": name, "object": "model", "owned_by": "byorelay-test"},
		}})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		if req.Model != name {
			// What a real server answers for a model it does not have; the
			// backend maps it to model-not-found.
			http.Error(w, `{"error":"no such model"}`, http.StatusNotFound)
			return
		}
		prompt := req.Messages[len(req.Messages)-1].Content
		m.mu.Lock()
		m.prompts = append(m.prompts, prompt)
		m.mu.Unlock()
		writeJSON(w, map[string]any{
			"id": "chatcmpl-test", "object": "chat.completion", "model": name,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": Answer(prompt)},
				"finish_reason": "stop",
			}},
		})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	m.URL = srv.URL + "/v1"
	return m
}

// Prompts are the prompts the model was asked, in order.
func (m *Model) Prompts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.prompts...)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
