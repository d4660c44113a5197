// Package backendflag is the flags that choose what answers a Go daemon's
// jobs, shared by `byorelay daemon` and `byorelay-local demo` so both name
// and build a backend the same way.
package backendflag

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/byorelay/byorelay/client/daemon"
)

// Flags choose what answers jobs.
type Flags struct {
	kind      string
	baseURL   string
	model     string
	backendID string
	apiKeyEnv string
}

// Register adds the flags to fs.
func (b *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&b.kind, "backend", "echo", "echo (answers with the prompt) or openai (an OpenAI-compatible server)")
	fs.StringVar(&b.baseURL, "openai-url", "http://127.0.0.1:11434/v1", "API root of the OpenAI-compatible server (Ollama, llama.cpp, vLLM, ...)")
	fs.StringVar(&b.model, "model", "", "model name, for --backend openai")
	fs.StringVar(&b.backendID, "backend-id", "openai-http", "protocol backend id to advertise: ollama, llamacpp, vllm, openai-http, ...")
	fs.StringVar(&b.apiKeyEnv, "api-key-env", "", "environment variable holding the server's API key, if it needs one")
}

// Build is the backend the parsed flags name.
func (b *Flags) Build() (daemon.Backend, error) {
	switch b.kind {
	case "echo":
		return daemon.EchoBackend{}, nil
	case "openai":
		if b.model == "" {
			return nil, errors.New("--backend openai needs --model")
		}
		key := ""
		if b.apiKeyEnv != "" {
			key = os.Getenv(b.apiKeyEnv)
		}
		return daemon.OpenAIBackend{BaseURL: b.baseURL, Model: b.model, ID: b.backendID, APIKey: key}, nil
	default:
		return nil, fmt.Errorf("unknown --backend %q (echo or openai)", b.kind)
	}
}
