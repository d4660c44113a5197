package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/relay"
)

// Handler is the HTTP function name as a Lambda handler. Every relay
// function runs the whole relay router: API Gateway has already picked the
// function by route, and the relay's own dispatch then answers exactly as
// the reference does (a function never answers for a path it was not
// routed, so the extra routes cost nothing).
func (st *Stack) Handler(name string) (Handler, error) {
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if f.Kind != KindHTTP {
		return nil, fmt.Errorf("lambdafn: %s is not an HTTP function", name)
	}
	switch f.Serves {
	case ServesAdmin:
		return st.adminHandler, nil
	case ServesPage:
		return st.catchAllHandler, nil
	default:
		return st.relayHandler, nil
	}
}

// Relay is the container's relay: built at Open, or by the first call when
// the grant key is read from SSM (an error then means it could not be
// read, and the caller must not serve without it).
func (st *Stack) Relay(ctx context.Context) (*relay.Relay, error) {
	r, err := st.relay.Get(ctx)
	if err != nil {
		st.log.ErrorContext(ctx, "relay not built", slog.String("problem", err.Error()))
	}
	return r, err
}

// AttachHandler is the stream attach function's handler, for lambdaurl:
// the relay's attach alone, as Server-Sent Events when the caller accepts
// them and as the long-poll otherwise; every other path answers 404
// (relay.AttachHandler).
func (st *Stack) AttachHandler() http.Handler {
	attach := container.Defer(func(ctx context.Context) (http.Handler, error) {
		r, err := st.Relay(ctx)
		if err != nil {
			return nil, err
		}
		return r.AttachHandler(), nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, err := attach.Get(r.Context())
		if err != nil {
			writeEvent(w, container.Unavailable())
			return
		}
		st.Calibrate(r.Context())
		h.ServeHTTP(w, r)
		st.noteClock()
	})
}

// writeEvent writes an API Gateway response as plain HTTP.
func writeEvent(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, resp.Body)
}

func (st *Stack) relayHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp, err := st.serve(ctx, ev)
	if err != nil {
		return failedEvent(err), nil
	}
	return toAPIGateway(resp), nil
}

// errUnavailable is serve's error when the relay could not be built.
var errUnavailable = errors.New("lambdafn: relay unavailable")

// failedEvent answers an event serve could not take: its relay could not
// be built, or the event itself was not one.
func failedEvent(err error) events.APIGatewayV2HTTPResponse {
	if errors.Is(err, errUnavailable) {
		return container.Unavailable()
	}
	return container.BadEvent()
}

// serve answers one event with the relay. The relay comes first: on a cold
// container with a deferred grant key, getting it starts the clock's
// calibrating read before the key's, so the two round trips overlap.
func (st *Stack) serve(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (relay.Response, error) {
	r, err := st.Relay(ctx)
	if err != nil {
		return relay.Response{}, errUnavailable
	}
	st.Calibrate(ctx)
	req, err := fromAPIGateway(ev)
	if err != nil {
		st.log.WarnContext(ctx, "undecodable event", slog.String("problem", err.Error()))
		return relay.Response{}, err
	}
	if id := ev.RequestContext.RequestID; id != "" {
		ctx = relay.WithRequestID(ctx, id)
	}
	resp := r.Handle(ctx, req)
	st.noteClock()
	return resp, nil
}

// catchAllHandler serves the verification page, and every other path as
// the relay (a claim among them: /byollm/x/claim dispatches to claim, and
// wakes the sweeper as the claim function's does). The page sits outside /byollm and /relay, where the
// reference answers 404, so no protocol path changes meaning.
func (st *Stack) catchAllHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	method := ev.RequestContext.HTTP.Method
	if ev.RawPath == controlplane.ApprovePagePath && (method == http.MethodGet || method == http.MethodHead) {
		req, err := fromAPIGateway(ev)
		if err != nil {
			return container.BadEvent(), nil
		}
		r, err := st.Relay(ctx)
		if err != nil {
			return container.Unavailable(), nil
		}
		// Behind an edge the page is no way around it: a request without
		// the edge's secret goes on to the relay, which refuses it as it
		// refuses every other path.
		if ok, err := r.PassesOriginLock(ctx, req.Header); err == nil && ok {
			return toAPIGateway(serveHTTP(ctx, approvePage(), req)), nil
		}
	}
	return st.relayHandler(ctx, ev)
}

// approvePage is built once, on first use: it hashes its script for its
// CSP, which no function but the catch-all needs at its cold start.
var approvePage = sync.OnceValue(controlplane.ApprovePage)

// wake schedules the sweeper for when a claim's first awaiting-payload
// window closes (relay.Config.AwaitingOpened). A failed wake-up costs
// timeliness, not correctness: the periodic schedule and every later claim
// sweep too. So it is logged, and the device still gets its jobs.
func (st *Stack) wake(ctx context.Context, untilMs int64) {
	if err := st.waker.Wake(ctx, time.UnixMilli(untilMs)); err != nil {
		st.log.WarnContext(ctx, "sweeper wake-up not scheduled", slog.String("problem", err.Error()))
	}
}
