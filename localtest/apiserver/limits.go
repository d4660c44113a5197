package apiserver

import "net/http"

// Payload limits of the deployed path, mirrored so a client meets them on
// the laptop first rather than in AWS.
//
// The binding one is Lambda's: a synchronous invoke carries the whole event
// JSON (headers, request context and the body, base64-inflated when binary)
// and must be smaller than 6,291,456 bytes, so a BYOLLM envelope just under
// the protocol's own 6 MiB ceiling (MAX_ENVELOPE_BYTES) never reaches the
// function: API Gateway answers 413 before the relay can give its own 400
// "too large" answer. API Gateway's 10 MB body cap only matters as a bound on
// what we read.
const (
	// MaxRequestBody is API Gateway's HTTP API payload quota (10 MB).
	MaxRequestBody = 10 * 1024 * 1024
	// MaxInvokePayload is Lambda's synchronous request limit: the event
	// JSON must be smaller than this.
	MaxInvokePayload = 6 * 1024 * 1024
	// MaxResponsePayload is Lambda's synchronous response limit (6 MiB +
	// 100 bytes, as measured): the response JSON may be at most this.
	MaxResponsePayload = 6*1024*1024 + 100
)

// gatewayError is one of API Gateway's own answers, as opposed to a
// function's. They are JSON bodies of the form {"message": ...}.
type gatewayError struct {
	status int
	body   string
}

var (
	// No route and no $default route.
	errNotFound = gatewayError{http.StatusNotFound, `{"message":"Not Found"}`}
	// The function failed: it returned an error, panicked, timed out, or
	// returned a response Lambda or API Gateway cannot use (over the
	// response limit, or without a valid status code).
	errInternal = gatewayError{http.StatusInternalServerError, `{"message":"Internal Server Error"}`}
	// Over the 10 MB body quota or over Lambda's invoke limit. The body text
	// is API Gateway's status phrase; its exact wording for HTTP APIs is not
	// documented (REST APIs have been observed to say "Request Too Long").
	errTooLarge = gatewayError{http.StatusRequestEntityTooLarge, `{"message":"Request Entity Too Large"}`}
	// The client hung up before the function answered: nothing is
	// written, since no one is left to read it, and the log records
	// statusClientClosed.
	errClientClosed = gatewayError{statusClientClosed, ""}
)

// statusClientClosed is the status a request's log line records when the
// client hung up first: 499, the "client closed request" of nginx's logs,
// which no client ever receives.
const statusClientClosed = 499

func (e gatewayError) write(w http.ResponseWriter, requestID string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Apigw-Requestid", requestID)
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(e.body))
}
