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

// StreamFault is something that went wrong reading a live stream or
// keeping its checkpoint (docs/streaming.md). None of them costs the
// reader correct text, only smoothness: the stream ends stale and the
// sealed result still arrives. But each says something an operator needs
// to hear: a store that refuses checkpoints, a relay that breaks the
// lane's rules, a frame someone altered.
type StreamFault struct {
	Kind FaultKind
	// JobID and LeaseID name the stream: the job, and the lease whose run
	// it is ("" when the fault came before a grant was read).
	JobID   string
	LeaseID string
	// Reason says what happened, in words fit for a log line; it never
	// carries the stream's text.
	Reason string
	// Err is the underlying error, when there is one.
	Err error
}

// FaultKind tells the faults apart, so each can be counted and alarmed on
// by itself.
type FaultKind string

const (
	// FaultCheckpoint: a checkpoint write or read failed in the ledger.
	FaultCheckpoint FaultKind = "checkpoint"
	// FaultTampered: something sealed did not open: a frame that does not
	// authenticate under its lease's key while that lease still holds the
	// job, or a checkpoint that does not open for its job and lease.
	FaultTampered FaultKind = "tampered"
	// FaultRelay: the relay broke the lane's rules (a gap, a frame out of
	// order, text in the clear, a seal past the text it sent, a malformed
	// event), refused the attach, or did not answer it within
	// AttachTimeout.
	FaultRelay FaultKind = "relay"
	// FaultLease: the run the stream belongs to stopped being the job's:
	// its lease lapsed (the relay said stale) or the job was claimed again
	// under another lease (its frames are another run's).
	FaultLease FaultKind = "lease"
)

func (f StreamFault) String() string {
	s := string(f.Kind) + ": " + f.Reason
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}
