package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/byorelay/byorelay/client/daemon"
)

func TestOpenAISendsOneChatCompletionAndReadsTheAnswer(t *testing.T) {
	var got struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	var auth, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.Path, r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"four"},"finish_reason":"length"}]}`))
	}))
	defer srv.Close()

	b := daemon.OpenAIBackend{BaseURL: srv.URL + "/v1", Model: "qwen3", APIKey: "k", ID: "ollama"}
	answer, err := b.Run(context.Background(), "2+2?")
	if err != nil {
		t.Fatal(err)
	}
	if answer.Text != "four" || answer.Stop != "length" {
		t.Fatalf("answer = %+v", answer)
	}
	if path != "/v1/chat/completions" || auth != "Bearer k" || got.Model != "qwen3" || got.Stream ||
		len(got.Messages) != 1 || got.Messages[0].Role != "user" || got.Messages[0].Content != "2+2?" {
		t.Fatalf("request: path %s auth %q body %+v", path, auth, got)
	}
	if info := b.Info(); info.ID != "ollama" || info.Class != "http" || info.Model != "qwen3" {
		t.Fatalf("info = %+v", info)
	}
}

func TestOpenAIBackendFailuresCarryTheReferenceCodes(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		code   string
	}{
		{"a 404 is an unknown model", 404, `{}`, "model-not-found"},
		{"a 401 is a credentials problem", 401, `{}`, "unauthorized"},
		{"a 500 is a backend error", 500, `{}`, "backend-error"},
		{"an answer in another shape is a backend error", 200, `{"output":"x"}`, "backend-error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			_, err := daemon.OpenAIBackend{BaseURL: srv.URL, Model: "m"}.Run(context.Background(), "p")
			var be *daemon.BackendError
			if !errors.As(err, &be) || be.Code != tc.code {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
		})
	}
	_, err := daemon.OpenAIBackend{BaseURL: "http://127.0.0.1:1", Model: "m"}.Run(context.Background(), "p")
	var be *daemon.BackendError
	if !errors.As(err, &be) || be.Code != "backend-unreachable" {
		t.Fatalf("unreachable server: err = %v", err)
	}
}

func TestOpenAIRefusesBaseURLsTheReferenceRefuses(t *testing.T) {
	for _, base := range []string{
		"ftp://127.0.0.1/v1",
		"http://user:pw@127.0.0.1/v1",
		"http://169.254.169.254/latest",
		"http://metadata.google.internal/v1",
		"http://169.254.1.1/v1",
		"http://[fe80::1]/v1",
		"http://0.0.0.0:11434/v1",
		"not a url",
	} {
		_, err := daemon.OpenAIBackend{BaseURL: base, Model: "m"}.Run(context.Background(), "p")
		var be *daemon.BackendError
		if !errors.As(err, &be) || be.Code != "backend-error" {
			t.Errorf("%s: err = %v, want a refusal before any call", base, err)
		}
	}
}
