package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
)

// ErrorKind is how the daemon reacts to a refused call, as the byollm
// daemon does: the body's error code first, the HTTP status only after.
type ErrorKind string

const (
	KindUnreachable        ErrorKind = "unreachable"
	KindRevoked            ErrorKind = "revoked"
	KindUnauthorized       ErrorKind = "unauthorized"
	KindRejected           ErrorKind = "rejected"
	KindVersionUnsupported ErrorKind = "version-unsupported"
	KindTooLate            ErrorKind = "too-late"
	KindClockSkew          ErrorKind = "clock-skew"
	KindNotReady           ErrorKind = "not-ready"
	KindForbidden          ErrorKind = "forbidden"
	KindRateLimited        ErrorKind = "rate-limited"
	KindServerError        ErrorKind = "server-error"
	KindMalformed          ErrorKind = "malformed-response"
)

// CallError is a relay call that did not succeed.
type CallError struct {
	Endpoint   string
	Kind       ErrorKind
	Message    string
	RetryAfter time.Duration
}

func (e *CallError) Error() string {
	return fmt.Sprintf("relay %s: %s: %s", e.Endpoint, e.Kind, e.Message)
}

// Retryable is the byollm daemon's rule: only no answer at all, not-ready,
// rate-limited and server-error are worth asking again.
func (e *CallError) Retryable() bool {
	switch e.Kind {
	case KindUnreachable, KindNotReady, KindRateLimited, KindServerError:
		return true
	}
	return false
}

func kindOf(err error) ErrorKind {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Kind
	}
	return ""
}

// maxResponseBytes bounds a relay answer: a fetch carries one envelope of
// at most 6 MiB.
const maxResponseBytes = protocol.MaxEnvelopeBytes + 1<<20

// post sends one daemon-plane call. signed is false only for pair.
func (d *Daemon) post(ctx context.Context, endpoint string, body any, out protocol.Validator, signed bool) error {
	raw, err := protocol.Encode(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", endpoint, err)
	}
	path := "/byollm/" + endpoint
	if endpoint == streamAppendEndpoint {
		path = seal.StreamAppendPath
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.relayURL+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if endpoint == "claim" && d.streamsOn() {
		// The opt-in a 0.1.1 relay ignores and a 0.1.1 daemon never sends.
		req.Header.Set(seal.StreamsHeader, seal.StreamsVersion1)
	}
	req.Header.Set("Accept", "application/json")
	if signed {
		runnerID := d.runnerID()
		sig := protocol.SignRequest(d.keys, endpoint, runnerID, d.now(), raw)
		sig.SetHeaders(req.Header, protocol.HeaderRunner)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &CallError{Endpoint: endpoint, Kind: KindUnreachable, Message: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &CallError{Endpoint: endpoint, Kind: KindUnreachable, Message: err.Error()}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return callErrorFrom(endpoint, resp, data)
	}
	// Every 2xx body must match its schema exactly, as the reference
	// daemon parses it; anything else is malformed, never half-believed.
	if err := protocol.DecodeStrict(data, out); err != nil {
		return &CallError{Endpoint: endpoint, Kind: KindMalformed, Message: err.Error()}
	}
	return nil
}

func callErrorFrom(endpoint string, resp *http.Response, data []byte) error {
	e := &CallError{Endpoint: endpoint, Message: "HTTP " + strconv.Itoa(resp.StatusCode)}
	var wire struct {
		Error      string `json:"error"`
		Message    string `json:"message"`
		RetryAfter *int64 `json:"retryAfter"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		e.Kind = KindMalformed
		return e
	}
	if wire.Message != "" {
		e.Message = wire.Message
	}
	if wire.RetryAfter != nil && *wire.RetryAfter >= 0 {
		e.RetryAfter = time.Duration(*wire.RetryAfter) * time.Second
	} else if s, err := strconv.ParseUint(resp.Header.Get("Retry-After"), 10, 31); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	// The code before the status: too-late and not-ready share a 409 and
	// carry opposite instructions, and only `revoked` means revocation
	// (never infer it from a 403).
	switch wire.Error {
	case protocol.CodeRevoked:
		e.Kind = KindRevoked
	case protocol.CodeUnsupportedProtocolVersion, protocol.CodeDaemonBelowFloor:
		e.Kind = KindVersionUnsupported
	case protocol.CodeTooLate:
		e.Kind = KindTooLate
	case protocol.CodeClockSkew:
		e.Kind = KindClockSkew
	default:
		switch s := resp.StatusCode; {
		case s == http.StatusUnauthorized:
			e.Kind = KindUnauthorized
		case s == http.StatusForbidden:
			e.Kind = KindForbidden
		case s == http.StatusConflict:
			e.Kind = KindNotReady
		case s == http.StatusTooManyRequests:
			e.Kind = KindRateLimited
		case s >= 500:
			e.Kind = KindServerError
		default:
			e.Kind = KindRejected
		}
	}
	return e
}
