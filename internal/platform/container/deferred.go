package container

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/protocol"
)

// Deferred is a part of a container built by the first request that needs
// it rather than at init, and built again by a later request when building
// failed. It is for parts that wait on a network round trip, a key read
// from Parameter Store: in init that round trip was two thirds of the
// function's init duration, and on a cold start the first request waits
// for it wherever it is made.
//
// What a failure costs moves from the container to the request: the
// request is answered Unavailable (clients retry a 503) and the next one
// reads again, where a failed init would have been retried by Lambda. A
// request never proceeds without the part: Get returns it built, or an
// error.
type Deferred[T any] struct {
	build func(context.Context) (T, error)
	// mu makes concurrent first requests (`byorelay serve`, a test) share
	// one build rather than each making the round trip.
	mu    sync.Mutex
	built atomic.Pointer[T]
}

// Defer is a Deferred that build makes on first use.
func Defer[T any](build func(context.Context) (T, error)) *Deferred[T] {
	return &Deferred[T]{build: build}
}

// Built is a Deferred whose part is already built: a caller that injected
// the key, so there is nothing to wait for.
func Built[T any](v T) *Deferred[T] {
	d := &Deferred[T]{}
	d.built.Store(&v)
	return d
}

// Get is the part, built by this call if no call has built it yet.
func (d *Deferred[T]) Get(ctx context.Context) (T, error) {
	if v := d.built.Load(); v != nil {
		return *v, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.built.Load(); v != nil {
		return *v, nil
	}
	v, err := d.build(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	d.built.Store(&v)
	return v, nil
}

// BadEvent answers an event API Gateway could not have produced (a base64
// body that does not decode) the way the relay and the site server answer
// a body they cannot read: 400 with the protocol's bare bad-request body.
// Returning an error instead fails the invocation, which API Gateway turns
// into a 500 with its own body and the function's Errors metric (and its
// alarm) counts as a fault of the function.
func BadEvent() events.APIGatewayV2HTTPResponse {
	body, _ := protocol.Encode(protocol.BareError{Error: protocol.CodeBadRequest})
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusBadRequest,
		Headers:    map[string]string{"content-type": "application/json"},
		Body:       string(body),
	}
}

// Unavailable answers a request whose Deferred part could not be built: a
// 503 server-error with the protocol's error body, which every client
// retries. The request was not read, so nothing changed.
func Unavailable() events.APIGatewayV2HTTPResponse {
	body, _ := protocol.Encode(protocol.NewWireError(protocol.CodeServerError,
		"this function could not read its key just now; try again shortly"))
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusServiceUnavailable,
		Headers:    map[string]string{"content-type": "application/json", "cache-control": "no-store"},
		Body:       string(body),
	}
}
