package daemon

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Backend runs opened work on the owner's own model.
type Backend interface {
	// Info says what this backend is, for the capability matrix and for
	// the signed run metadata.
	Info() BackendInfo
	// Run answers one prompt. ctx ends when the job is cancelled, lost,
	// past its deadline or the daemon shuts down; a backend returns
	// promptly then. An error should be a *BackendError; anything else
	// counts as "backend-error".
	Run(ctx context.Context, prompt string) (Answer, error)
}

// BackendInfo describes a backend.
type BackendInfo struct {
	// ID is a protocol BackendId ("ollama", "llamacpp", "vllm",
	// "openai-http", ...): a closed enum, checked by the relay.
	ID string
	// Class is "http" or "process".
	Class string
	// Model is the model that answers.
	Model string
}

// Answer is a backend's successful reply.
type Answer struct {
	Text string
	// Stop is why generation ended: "end", "length", "stop-sequence" or
	// "unknown"; "" when the backend cannot tell (StopReported false).
	Stop string
}

// BackendError is a backend failure, by the reference daemon's codes:
// backend-unreachable,
// backend-error, model-not-found, unauthorized, quota-exhausted,
// insufficient-memory, timeout, output-too-large, canceled.
type BackendError struct {
	Code    string
	Message string
}

func (e *BackendError) Error() string { return e.Code + ": " + e.Message }

// serviceUnavailable is what a site is told for every failure that is the
// owner's business, in the reference daemon's words.
const serviceUnavailable = "a device service is unavailable — its owner has been told"

// outcomeForSite maps a backend failure to what the site may learn: the class,
// never the backend's own words, which quote the owner's machine and name the
// service.
func outcomeForSite(err error) protocol.Outcome {
	var be *BackendError
	code := "backend-error"
	if errors.As(err, &be) {
		code = be.Code
	}
	switch code {
	case "timeout":
		return protocol.FailedOutcome("timeout", "the device did not answer in time", true)
	case "output-too-large":
		return protocol.FailedOutcome("output-too-large", "the answer was too large to return", false)
	case "canceled":
		return protocol.CanceledOutcome()
	default:
		return protocol.FailedOutcome("service_unavailable", serviceUnavailable, true)
	}
}

// ComposePrompt is the text a single-prompt backend is asked:
// the system instructions, then the prompt or the labelled chat turns.
func ComposePrompt(kind string, p protocol.JobPayload) string {
	var sections []string
	if p.System != nil && strings.TrimSpace(*p.System) != "" {
		sections = append(sections, "System instructions:\n"+*p.System)
	}
	if kind == protocol.KindGenerate {
		sections = append(sections, p.Prompt)
		return strings.Join(sections, "\n\n")
	}
	turns := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		label := "User"
		switch m.Role {
		case "assistant":
			label = "Assistant"
		case "system":
			label = "System"
		}
		turns[i] = label + ": " + m.Content
	}
	return strings.Join(append(sections, strings.Join(turns, "\n\n")), "\n\n")
}

// EchoBackend answers every prompt with the prompt itself, prefixed. For
// tests and the demo: a site can check that the answer is exactly what it
// asked, which proves the payload and result legs both went through intact.
type EchoBackend struct {
	// Prefix is put before the echoed prompt; "" means "echo: ".
	Prefix string
	// Model names it in the run metadata; "" means "echo".
	Model string
	// Drip, when set, makes a streamed answer arrive a word at a time with
	// this pause between words (the demo's way to show streaming without
	// a model).
	Drip time.Duration
}

// Info describes the echo backend as an OpenAI-compatible HTTP backend,
// since BackendId is a closed enum with no test entry.
func (e EchoBackend) Info() BackendInfo {
	model := e.Model
	if model == "" {
		model = "echo"
	}
	return BackendInfo{ID: "openai-http", Class: "http", Model: model}
}

// Run echoes, unless the job was already cancelled.
func (e EchoBackend) Run(ctx context.Context, prompt string) (Answer, error) {
	if ctx.Err() != nil {
		return Answer{}, &BackendError{Code: "canceled", Message: "the job was canceled"}
	}
	prefix := e.Prefix
	if prefix == "" {
		prefix = "echo: "
	}
	return Answer{Text: prefix + prompt, Stop: "end"}, nil
}
