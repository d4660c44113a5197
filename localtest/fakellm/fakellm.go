// Package fakellm is a stand-in model server speaking the two calls of the
// OpenAI chat API that byollm's openai-http backend makes: GET /v1/models
// (its health probe: the daemon claims nothing unless its configured model
// is listed) and POST /v1/chat/completions, without streaming. Nothing is
// generated: every prompt is answered Answer(prompt), so a test can tell
// which prompt a result answers. `byorelay fake-llm` serves it for demos;
// the peer tests serve one per test (localtest/peers.Model).
package fakellm

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Answer is what the stand-in says to a prompt.
func Answer(prompt string) string { return "fake-llm stand-in answer to: " + prompt }

// maxRequest bounds a chat request's body: far above any prompt a test or
// a demo sends, far below what would matter to the machine.
const maxRequest = 8 << 20

// Handler serves the one model named model. onPrompt, when not nil, hears
// every prompt answered, in order.
func Handler(model string, onPrompt func(prompt string)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": model, "object": "model", "owned_by": "byorelay-fake-llm"},
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
		if err := json.NewDecoder(io.LimitReader(r.Body, maxRequest)).Decode(&req); err != nil || len(req.Messages) == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "a chat completion needs messages"}})
			return
		}
		if req.Model != model {
			// What a real server answers for a model it does not have; the
			// backend maps it to model-not-found.
			writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": "no model " + strconv.Quote(req.Model)}})
			return
		}
		prompt := req.Messages[len(req.Messages)-1].Content
		if onPrompt != nil {
			onPrompt(prompt)
		}
		answer := Answer(prompt)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{
				"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": answer},
			}},
			"usage": map[string]any{"prompt_tokens": len(prompt) / 4, "completion_tokens": len(answer) / 4, "total_tokens": (len(prompt) + len(answer)) / 4},
		})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
