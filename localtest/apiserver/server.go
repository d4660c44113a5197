// Package apiserver serves every function of template.yaml on one port, the
// way API Gateway's HTTP API and Lambda would: it reads the HttpApi routes
// from the template, picks a route as API Gateway does (the most specific
// path, a method before ANY, $default last), turns the request into a
// payload format 2.0 event, invokes the very handler the function's Lambda
// runs, and turns its response back into HTTP.
//
// What it mirrors beyond routing, so a client meets it on the laptop first:
// the event crosses a JSON round trip (the handler sees what the Lambda
// runtime would decode), Lambda's 6 MB invoke and response limits, the
// function's Timeout as the handler's deadline, and API Gateway's own
// answers ({"message":"Not Found"}, 413, 500) where the function never
// answers. See limits.go.
//
// What it does not: authorizers (the relay's routes have none; the admin
// API's IAM auth is not modelled), stages other than $default, CORS,
// throttling, and Lambda's one-request-per-instance isolation: concurrent
// requests share one handler, so handlers must be safe for concurrent use.
package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Handler is a function's Lambda handler for HTTP API events.
type Handler func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Config is what a Server serves.
type Config struct {
	// Routes, usually RoutesFromTemplate(byorelay.Template).
	Routes []Route
	// Handlers by function logical id. Every routed function needs one.
	Handlers map[string]Handler
	// Now stamps requestContext.time; nil is the host clock.
	Now func() time.Time
	// Log gets one line per request; nil discards.
	Log *slog.Logger
}

// Server is an http.Handler standing in for API Gateway plus Lambda.
type Server struct {
	routes   []Route
	handlers map[string]Handler
	now      func() time.Time
	log      *slog.Logger
}

// New checks that every route has a handler, so a function added to the
// template and missing from the registry fails at start, not on first call.
func New(cfg Config) (*Server, error) {
	for _, r := range cfg.Routes {
		if cfg.Handlers[r.Function] == nil {
			return nil, fmt.Errorf("route %q: no handler for function %s", r.Key, r.Function)
		}
	}
	s := &Server{routes: cfg.Routes, handlers: cfg.Handlers, now: cfg.Now, log: cfg.Log}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Routes are the routes served, sorted by key.
func (s *Server) Routes() []Route { return s.routes }

// ServeHTTP routes, invokes and answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	requestID := newRequestID()
	status, function, by := s.serve(w, r, requestID)
	// A function logs its own requests; what only the gateway knows (no
	// route, too large, the function failed) is worth a warning. A client
	// that hung up is neither the function's answer nor a fault: it is
	// said as what it is, with how long the request had run, so a dropped
	// poll is not read as a function that timed out.
	level, msg := slog.LevelDebug, "api gateway"
	switch by {
	case byGateway:
		level = slog.LevelWarn
	case byClient:
		level, msg = slog.LevelInfo, "client closed the request"
	}
	s.log.Log(r.Context(), level, msg,
		"method", r.Method, "path", r.URL.Path, "function", function,
		"status", status, "ms", s.now().Sub(start).Milliseconds(),
		"requestId", requestID, "answeredBy", by)
}

// Who ended a request, as the request's log line says.
const (
	// byFunction: the function's response was passed on.
	byFunction = "function"
	// byGateway: API Gateway answered itself.
	byGateway = "gateway"
	// byClient: the client hung up before the function answered, and
	// nothing was sent.
	byClient = "client"
)

// serve answers one request and says who ended it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, requestID string) (status int, function, by string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
	if err != nil {
		if r.Context().Err() != nil {
			return statusClientClosed, "", byClient
		}
		errInternal.write(w, requestID)
		return errInternal.status, "", byGateway
	}
	if len(body) > MaxRequestBody {
		errTooLarge.write(w, requestID)
		return errTooLarge.status, "", byGateway
	}
	m, ok := selectRoute(s.routes, r.Method, r.URL.Path)
	if !ok {
		errNotFound.write(w, requestID)
		return errNotFound.status, "", byGateway
	}
	function = m.route.Function
	ev := newEvent(r, m, body, requestID, s.now())
	resp, gwErr := s.invoke(r.Context(), m.route, ev)
	if gwErr == &errClientClosed {
		return statusClientClosed, function, byClient
	}
	if gwErr != nil {
		gwErr.write(w, requestID)
		return gwErr.status, function, byGateway
	}
	if err := writeResponse(w, resp, requestID); err != nil {
		s.log.Error("function response unusable", "function", function, "err", err)
		errInternal.write(w, requestID)
		return errInternal.status, function, byGateway
	}
	return resp.StatusCode, function, byFunction
}

// invoke runs the route's handler as Lambda would: the event and response
// both cross JSON (so the handler decodes exactly what the runtime would
// give it, and the limits apply to the real byte counts), under the
// function's timeout.
//
// A client that hangs up ends the request's context, and with it the
// handler's: that is errClientClosed, not a timeout or a function error,
// since only the function's own deadline passing is a timeout.
func (s *Server) invoke(request context.Context, route *Route, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, *gatewayError) {
	var none events.APIGatewayV2HTTPResponse
	payload, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("marshal event", "err", err)
		return none, &errInternal
	}
	if len(payload) >= MaxInvokePayload {
		s.log.Warn("event over Lambda's invoke limit", "function", route.Function, "bytes", len(payload))
		return none, &errTooLarge
	}
	var in events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(payload, &in); err != nil {
		s.log.Error("unmarshal event", "err", err)
		return none, &errInternal
	}

	ctx, cancel := context.WithTimeout(request, route.Timeout)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       newRequestID(),
		InvokedFunctionArn: "arn:aws:lambda:us-east-1:" + localAccountID + ":function:" + route.Function,
	})
	type result struct {
		resp events.APIGatewayV2HTTPResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		resp, err := s.handlers[route.Function](ctx, in)
		done <- result{resp, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		if request.Err() != nil {
			return none, &errClientClosed
		}
		s.log.Error("function timed out", "function", route.Function, "timeout", route.Timeout)
		return none, &errInternal
	}
	if res.err != nil && request.Err() != nil {
		// The handler gave up because its caller did.
		return none, &errClientClosed
	}
	if res.err != nil {
		s.log.Error("function error", "function", route.Function, "err", res.err)
		return none, &errInternal
	}

	out, err := json.Marshal(res.resp)
	if err != nil {
		s.log.Error("marshal response", "function", route.Function, "err", err)
		return none, &errInternal
	}
	if len(out) > MaxResponsePayload {
		s.log.Error("response over Lambda's limit", "function", route.Function, "bytes", len(out))
		return none, &errInternal
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return none, &errInternal
	}
	return resp, nil
}

// writeResponse answers with a format 2.0 response: statusCode, headers,
// cookies (each a Set-Cookie), body (decoded when isBase64Encoded).
// multiValueHeaders belongs to format 1.0 and API Gateway ignores it here,
// so this does too. Nothing is added that the function did not set, except
// API Gateway's request id header: in particular no sniffed Content-Type.
func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse, requestID string) error {
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return fmt.Errorf("status code %d", resp.StatusCode)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return errors.New("isBase64Encoded body is not base64")
		}
		body = b
	}
	h := w.Header()
	for name, value := range resp.Headers {
		h.Set(name, value)
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if h.Get("Content-Type") == "" {
		h["Content-Type"] = nil
	}
	h.Set("Apigw-Requestid", requestID)
	w.WriteHeader(resp.StatusCode)
	// A write error means the client went away; the status is sent and
	// there is no one left to tell.
	_, _ = w.Write(body)
	return nil
}
