package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/byorelay/byorelay/localtest/fakellm"
)

// fakeModel is the model name the stand-in lists and answers as.
const fakeModel = "byorelay-fake"

// runFakeLLM is `byorelay-local fake-llm`: a stand-in model server speaking the
// two calls of the OpenAI chat API that byollm's openai-http backend makes,
// so a real daemon can run a job in a demo without a model installed
// (localtest/fakellm). It answers every prompt with a fixed sentence that
// quotes the prompt.
func runFakeLLM(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("byorelay-local fake-llm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 11500, "port on 127.0.0.1 (0 picks a free one)")
	model := fs.String("model", fakeModel, "the one model it lists and answers as")
	configOut := fs.String("byollm-config", "", "also write a byollm config.json naming this server as its one service,\nunless the file exists (e.g. .cache/demo/byollm-home/.byollm/config.json)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: byorelay-local fake-llm [flags]\n\nA stand-in OpenAI-compatible model server for demos (GET /v1/models,\nPOST /v1/chat/completions): it answers every prompt with a sentence that\nquotes it. Nothing is generated; use a real server (Ollama, llama.cpp,\nvLLM) for real answers.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintf(stderr, "byorelay-local fake-llm: %v (pick another: --port N)\n", err)
		return 1
	}
	base := "http://" + l.Addr().String() + "/v1"
	config := byollmConfig(base, *model)
	fmt.Fprintf(stdout, "fake-llm: a stand-in OpenAI-compatible model %q at %s\n", *model, base)
	if *configOut != "" {
		switch wrote, err := writeIfAbsent(*configOut, config); {
		case err != nil:
			fmt.Fprintf(stderr, "byorelay-local fake-llm: %v\n", err)
			_ = l.Close()
			return 1
		case wrote:
			fmt.Fprintf(stdout, "wrote %s\n", *configOut)
		default:
			fmt.Fprintf(stdout, "kept the existing %s; for this server it needs:\n%s", *configOut, config)
		}
	} else {
		fmt.Fprintf(stdout, "a byollm config.json (~/.byollm/config.json) that uses it:\n%s", config)
	}
	fmt.Fprintln(stdout, "Ctrl-C stops it.")

	srv := &http.Server{Handler: fakellm.Handler(*model, nil), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return 0
	case err := <-served:
		fmt.Fprintf(stderr, "byorelay-local fake-llm: %v\n", err)
		return 1
	}
}

// byollmConfig is a byollm config.json with this server as the one
// service for both text kinds, private to the device's owner.
func byollmConfig(baseURL, model string) []byte {
	cfg := map[string]any{
		"services": map[string]any{
			"fake": map[string]any{
				"type":    "openai-http",
				"baseUrl": baseURL,
				"model":   model,
				"kinds":   []string{"llm.generate", "llm.chat"},
				"offer":   "private",
			},
		},
	}
	out, _ := json.MarshalIndent(cfg, "", "  ")
	return append(out, '\n')
}

func writeIfAbsent(path string, data []byte) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}
