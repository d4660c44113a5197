package site

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// RelayError is a relay answer that was not a success. Code is the body's
// `error` ("" when the body was not the relay's JSON: an intermediary
// answered).
type RelayError struct {
	Endpoint   string
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration // from retryAfter or Retry-After; 0 if neither
}

func (e *RelayError) Error() string {
	code := e.Code
	if code == "" {
		code = "HTTP " + strconv.Itoa(e.Status)
	}
	return fmt.Sprintf("relay %s: %s: %s", e.Endpoint, code, e.Message)
}

// Retryable is the 0.1.1 site client's rule: 5xx, 429, not-ready and
// server-error mean the work is still there and this cycle should end
// quietly; everything else (a bad signature, an unknown site, a version the
// relay does not speak) will still be true in five seconds, and swallowing
// it would leave a site silently disconnected from its users.
func (e *RelayError) Retryable() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests ||
		e.Code == protocol.CodeNotReady || e.Code == protocol.CodeServerError
}

// EnqueueRefused means the relay declined to queue the job (a 409 on
// enqueue other than not-ready): purpose-not-declared, slot-unsatisfiable,
// slot-waiting or a code this SDK does not know yet. Nothing was queued, so
// nothing will arrive; whether publishing again later can help depends on
// Code (only slot-waiting clears on its own).
type EnqueueRefused struct {
	Code    string
	Message string
}

func (e *EnqueueRefused) Error() string {
	return "relay refused to queue the job: " + e.Code + ": " + e.Message
}

// IsRetryable reports whether err is a relay answer worth asking again.
// A network failure (no answer at all) is retryable too.
func IsRetryable(err error) bool {
	var re *RelayError
	if errors.As(err, &re) {
		return re.Retryable()
	}
	var ne *networkError
	var le *LedgerError
	return errors.As(err, &ne) || errors.As(err, &le)
}

// networkError is a request that got no HTTP answer.
type networkError struct{ err error }

func (e *networkError) Error() string { return "relay unreachable: " + e.err.Error() }
func (e *networkError) Unwrap() error { return e.err }

// relayErrorFrom reads a refusal. The body is parsed loosely on purpose:
// the site-plane enqueue codes are outside WireErrorCode, and a strict parse
// would turn them into "malformed" and lose the one word the caller needs.
func relayErrorFrom(endpoint string, resp *http.Response, body []byte) error {
	e := &RelayError{Endpoint: endpoint, Status: resp.StatusCode, Message: "HTTP " + strconv.Itoa(resp.StatusCode)}
	var wire struct {
		Error      string `json:"error"`
		Message    string `json:"message"`
		RetryAfter *int64 `json:"retryAfter"`
	}
	if json.Unmarshal(body, &wire) == nil {
		e.Code = wire.Error
		if wire.Message != "" {
			e.Message = wire.Message
		}
		if wire.RetryAfter != nil && *wire.RetryAfter >= 0 {
			e.RetryAfter = time.Duration(*wire.RetryAfter) * time.Second
		}
	}
	if e.RetryAfter == 0 {
		if s, err := strconv.ParseUint(resp.Header.Get("Retry-After"), 10, 31); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
	}
	if endpoint == "enqueue" && resp.StatusCode == http.StatusConflict && e.Code != protocol.CodeNotReady {
		return &EnqueueRefused{Code: e.Code, Message: e.Message}
	}
	return e
}
