package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// OpenAIBackend runs jobs on an OpenAI-compatible chat-completions server:
// Ollama (http://127.0.0.1:11434/v1), llama.cpp's server
// (http://127.0.0.1:8080/v1), vLLM (http://127.0.0.1:8000/v1) and the
// rest. One non-streaming call per job, the
// composed prompt as a single user message, as the reference does.
type OpenAIBackend struct {
	// BaseURL is the API root, ending in /v1 for the servers above.
	BaseURL string
	// Model is the model name the server knows.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// ID is the protocol BackendId to advertise ("ollama", "llamacpp",
	// "vllm", ...); "" means "openai-http".
	ID string
	// HTTPClient defaults to http.DefaultClient (the call's own deadline
	// comes from Timeout and the job).
	HTTPClient *http.Client
	// Timeout bounds one call; 0 means 5 minutes.
	Timeout time.Duration
	// MaxOutputBytes bounds the answer; 0 means 4 MiB.
	MaxOutputBytes int64
}

// Info describes the backend.
func (b OpenAIBackend) Info() BackendInfo {
	id := b.ID
	if id == "" {
		id = "openai-http"
	}
	return BackendInfo{ID: id, Class: "http", Model: b.Model}
}

// finishReasons maps finish_reason to a stop reason. Anything else is
// "unknown", never "end": an adapter that cannot tell must not claim the
// answer ran to completion.
var finishReasons = map[string]string{"stop": "end", "length": "length"}

// Run sends one chat completion.
func (b OpenAIBackend) Run(ctx context.Context, prompt string) (Answer, error) {
	resp, limit, cancel, err := b.send(ctx, prompt, false)
	if err != nil {
		return Answer{}, err
	}
	defer cancel()
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, &BackendError{Code: "canceled", Message: "the job was canceled"}
		}
		return Answer{}, &BackendError{Code: "backend-unreachable", Message: "reading the answer: " + err.Error()}
	}
	if int64(len(raw)) > limit {
		return Answer{}, &BackendError{Code: "output-too-large", Message: fmt.Sprintf("the model produced more than %d bytes", limit)}
	}
	var completion struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &completion); err != nil || len(completion.Choices) == 0 || completion.Choices[0].Message.Content == nil {
		return Answer{}, &BackendError{Code: "backend-error", Message: "the model server's response was not in OpenAI chat-completion shape"}
	}
	choice := completion.Choices[0]
	stop := "unknown"
	if choice.FinishReason != nil {
		if s, ok := finishReasons[*choice.FinishReason]; ok {
			stop = s
		}
	}
	return Answer{Text: *choice.Message.Content, Stop: stop}, nil
}

// send posts one chat completion (streamed or not) and checks the status;
// the caller reads and closes the body, then calls cancel.
func (b OpenAIBackend) send(ctx context.Context, prompt string, stream bool) (*http.Response, int64, context.CancelFunc, error) {
	endpoint, err := b.endpoint()
	if err != nil {
		return nil, 0, nil, &BackendError{Code: "backend-error", Message: err.Error()}
	}
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	limit := b.MaxOutputBytes
	if limit <= 0 {
		limit = 4 << 20
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	body, _ := json.Marshal(map[string]any{
		"model":    b.Model,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
		"stream":   stream,
	})
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, 0, nil, &BackendError{Code: "backend-error", Message: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if b.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.APIKey)
	}
	client := b.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, 0, nil, &BackendError{Code: "canceled", Message: "the job was canceled"}
		case errors.Is(err, context.DeadlineExceeded):
			return nil, 0, nil, &BackendError{Code: "timeout", Message: fmt.Sprintf("the model did not answer within %s", timeout)}
		default:
			return nil, 0, nil, &BackendError{Code: "backend-unreachable", Message: "could not reach the model server: " + err.Error()}
		}
	}
	var refused *BackendError
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		refused = &BackendError{Code: "unauthorized", Message: "the model server rejected our credentials"}
	case resp.StatusCode == http.StatusNotFound:
		refused = &BackendError{Code: "model-not-found", Message: fmt.Sprintf("the model server does not know %q", b.Model)}
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		refused = &BackendError{Code: "backend-error", Message: fmt.Sprintf("the model server returned HTTP %d", resp.StatusCode)}
	}
	if refused != nil {
		resp.Body.Close()
		cancel()
		return nil, 0, nil, refused
	}
	return resp, limit, cancel, nil
}

// endpoint is BaseURL/chat/completions, refusing a base URL the reference
// daemon refuses: only http(s), no credentials in the URL,
// and never a cloud metadata, link-local or wildcard address. The base URL
// is the owner's config, but a config can be written by whatever the owner
// pasted, and those addresses hand out credentials or go nowhere.
func (b OpenAIBackend) endpoint() (string, error) {
	base, err := url.Parse(b.BaseURL)
	if err != nil || !base.IsAbs() {
		return "", fmt.Errorf("base URL %q is not a valid absolute URL", b.BaseURL)
	}
	if base.Scheme != "http" && base.Scheme != "https" {
		return "", fmt.Errorf("base URL scheme %s is not http or https", base.Scheme)
	}
	if base.User != nil {
		return "", errors.New("base URL must not embed a username or password")
	}
	host := strings.ToLower(base.Hostname())
	switch {
	case metadataHosts[host]:
		return "", fmt.Errorf("%s is a cloud metadata endpoint", host)
	case host == "" || host == "0.0.0.0" || host == "::":
		return "", fmt.Errorf("%q is an address to listen on, not one to connect to", host)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLinkLocalUnicast() {
		return "", fmt.Errorf("%s is link-local", host)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	u := base.ResolveReference(&url.URL{Path: "chat/completions"})
	if u.Host != base.Host || u.Scheme != base.Scheme {
		return "", errors.New("computed endpoint left the configured origin")
	}
	return u.String(), nil
}

// metadataHosts are cloud metadata endpoints.
var metadataHosts = map[string]bool{
	"metadata.google.internal": true, "metadata.goog": true, "instance-data": true, "metadata": true,
	"169.254.169.254": true, "169.254.170.2": true, "fd00:ec2::254": true,
}
