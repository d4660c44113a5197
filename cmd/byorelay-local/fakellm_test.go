package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/localtest/fakellm"
)

// The stand-in answers byollm's health probe and a chat completion, and
// the config it writes is one byollm reads as an openai-http service for
// both text kinds (the real daemon running a job on it is docs/local.md's
// walkthrough).
func TestFakeLLMAnswersAsAnOpenAICompatibleServer(t *testing.T) {
	srv := httptest.NewServer(fakellm.Handler(fakeModel, nil))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != fakeModel {
		t.Fatalf("models: %+v", models)
	}

	for _, tc := range []struct {
		body   string
		status int
		answer string
	}{
		{`{"model":"byorelay-fake","messages":[{"role":"user","content":"hi"}]}`, 200, "fake-llm stand-in answer to: hi"},
		{`{"model":"llama3","messages":[{"role":"user","content":"hi"}]}`, 404, ""},
		{`{"model":"byorelay-fake","messages":[]}`, 400, ""},
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.answer != "" && (len(out.Choices) != 1 || out.Choices[0].Message.Content != tc.answer)) {
			t.Errorf("%s: %d %+v", tc.body, resp.StatusCode, out)
		}
	}

	path := filepath.Join(t.TempDir(), "home", ".byollm", "config.json")
	if wrote, err := writeIfAbsent(path, byollmConfig("http://127.0.0.1:11500/v1", fakeModel)); err != nil || !wrote {
		t.Fatalf("write config: %v %v", wrote, err)
	}
	if wrote, err := writeIfAbsent(path, []byte("{}")); err != nil || wrote {
		t.Fatalf("an existing config was overwritten: %v %v", wrote, err)
	}
	data, _ := os.ReadFile(path)
	var cfg struct {
		Services map[string]struct {
			Type, BaseURL, Model, Offer string
			Kinds                       []string
		} `json:"services"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	svc := cfg.Services["fake"]
	if svc.Type != "openai-http" || svc.Model != fakeModel || len(svc.Kinds) != 2 || svc.Offer != "private" {
		t.Fatalf("config: %s", data)
	}
}
