package controlplane

import (
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// Error is a refusal the admin API reports to its caller. Nothing was
// written when one is returned: every check runs before the write.
type Error struct {
	// Status is the HTTP status the API answers with.
	Status int
	// Code is a short machine-readable reason (bad-request, not-found,
	// conflict, too-large, busy).
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func invalid(format string, args ...any) error {
	return &Error{Status: http.StatusBadRequest, Code: "bad-request", Message: fmt.Sprintf(format, args...)}
}

// withinBound refuses an identifier the relay would refuse to carry
// (store.Max*): a site, device or consent the control plane accepted under
// it would be one the relay can never route for.
func withinBound(name, value string, max int) error {
	if len(value) > max || !utf8.ValidString(value) {
		return invalid("%s must be UTF-8 and at most %d bytes", name, max)
	}
	return nil
}

func notFound(format string, args ...any) error {
	return &Error{Status: http.StatusNotFound, Code: "not-found", Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Error{Status: http.StatusConflict, Code: "conflict", Message: fmt.Sprintf(format, args...)}
}

// ErrVersionConflict is a Storage's answer when a partition a change read is
// no longer at the version it read: somebody else changed it first. It is an
// answer, not a failure; the change is re-applied to what is there now.
var ErrVersionConflict = errors.New("controlplane: projection changed since it was read")

// ErrTooLarge refuses a record bigger than one stored item can hold.
var ErrTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Code: "too-large", Message: "the record is too large to store"}

// errBusy is what a change returns when every attempt lost to a concurrent
// change: retrying forever would let a hot writer starve an admin call.
var errBusy = &Error{Status: http.StatusServiceUnavailable, Code: "busy", Message: "the projection kept changing underneath this change; try again"}
