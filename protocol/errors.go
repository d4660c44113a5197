package protocol

import "net/http"

// Wire error codes, the protocol's closed set. "revoked", "no matching work"
// and "backend down" never share a message: a daemon that could not tell
// them apart would retry a revocation or give up on a passing outage, and
// distinct codes are how it tells them apart.
const (
	CodeBadRequest                 = "bad-request"
	CodeUnsupportedProtocolVersion = "unsupported-protocol-version"
	CodeDaemonBelowFloor           = "daemon-below-floor"
	CodeUnauthorized               = "unauthorized"
	CodeForbidden                  = "forbidden"
	CodeRevoked                    = "revoked"
	CodeNotFound                   = "not-found"
	CodeNotReady                   = "not-ready"
	CodeTooLate                    = "too-late"
	CodeClockSkew                  = "clock-skew"
	CodeRateLimited                = "rate-limited"
	CodeServerError                = "server-error"
)

// Site-plane refusal codes the reference relay serves that are not in
// the wire error codes (enqueue refusals, all 409). A site reads them; a
// strict WireError parse would refuse them, so they are kept apart.
const (
	CodePurposeNotDeclared = "purpose-not-declared"
	CodeSlotUnsatisfiable  = "slot-unsatisfiable"
	CodeSlotWaiting        = "slot-waiting"
)

// WireErrorCodes is the closed WireErrorCode enum, in the schema's order.
var WireErrorCodes = []string{
	CodeBadRequest, CodeUnsupportedProtocolVersion, CodeDaemonBelowFloor,
	CodeUnauthorized, CodeForbidden, CodeRevoked, CodeNotFound, CodeNotReady,
	CodeTooLate, CodeClockSkew, CodeRateLimited, CodeServerError,
}

// StatusOf is ERROR_STATUS: the HTTP status each wire error code is served
// with. Unknown codes answer 500, because a code outside the table is a bug
// on our side, never the caller's.
func StatusOf(code string) int {
	switch code {
	case CodeBadRequest, CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	case CodeDaemonBelowFloor:
		return http.StatusUpgradeRequired
	case CodeUnauthorized, CodeClockSkew:
		return http.StatusUnauthorized
	case CodeForbidden, CodeRevoked:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeNotReady, CodeTooLate:
		return http.StatusConflict
	case CodeRateLimited:
		return http.StatusTooManyRequests
	default:
		return http.StatusInternalServerError
	}
}

// WireError is an error body. Field order is the schema's, which is also the
// order every reference refusal writes its keys in. The code-specific extras
// (Supported/Minimum, Floor, ServerTime/MaxSkewMs) appear only on their own
// code; use the constructors.
type WireError struct {
	Error      string   `json:"error"`
	Message    string   `json:"message"`
	Supported  []string `json:"supported,omitzero"`
	Minimum    string   `json:"minimum,omitempty"`
	Floor      string   `json:"floor,omitempty"`
	RetryAfter *int64   `json:"retryAfter,omitempty"`
	ServerTime int64    `json:"serverTime,omitempty"`
	MaxSkewMs  int64    `json:"maxSkewMs,omitempty"`
}

// NewWireError is a plain `{error, message}` body.
func NewWireError(code, message string) WireError {
	return WireError{Error: code, Message: message}
}

// ClockSkewError is the reference relay's clock-skew refusal,
// served with status 401.
func ClockSkewError(now int64) WireError {
	return WireError{
		Error: CodeClockSkew,
		Message: "this request's timestamp is too far from the server's clock; " +
			"check the machine's time and try again",
		ServerTime: now,
		MaxSkewMs:  MaxClockSkewMs,
	}
}

// BelowFloorError is the daemon-below-floor refusal (status 426).
func BelowFloorError(message, floor string) WireError {
	return WireError{Error: CodeDaemonBelowFloor, Message: message, Floor: floor}
}

// RetryableError carries retryAfter seconds, for rate-limited and
// server-error.
func RetryableError(code, message string, retryAfterSeconds int64) WireError {
	return WireError{Error: code, Message: message, RetryAfter: &retryAfterSeconds}
}

// BareError is the `{error}` body with no message that the reference relay
// serves for an unknown path (404 not-found) and a bad debug query (400).
// It is not a valid WireError, and it is what goes on the wire there.
type BareError struct {
	Error string `json:"error"`
}
