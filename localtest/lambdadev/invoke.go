package lambdadev

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/localtest/demo"
)

// PrepareEvent makes a sample event for f sendable at now: an HTTP event
// gets the demo's values, leaseID for {{leaseId}} (demo.RelayLease), and
// fresh signatures (demo.World.PrepareWithLease); a schedule payload goes
// as it is.
func PrepareEvent(f lambdafn.Function, raw []byte, w *demo.World, now time.Time, leaseID string) ([]byte, error) {
	if f.Kind == lambdafn.KindStream {
		return prepareURLEvent(f, raw, w, now, leaseID)
	}
	return prepare(f.Name, f.Kind == lambdafn.KindHTTP, raw, w, now, leaseID)
}

// prepare is PrepareEvent and PrepareSiteEvent past their stack's kinds:
// an HTTP event is filled in and re-signed, anything else must be JSON and
// goes as it is.
func prepare(name string, http bool, raw []byte, w *demo.World, now time.Time, leaseID string) ([]byte, error) {
	if !http {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("%s: event is not JSON", name)
		}
		return raw, nil
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%s: event: %w", name, err)
	}
	if err := w.PrepareWithLease(&ev, now, leaseID); err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}

// prepareURLEvent is PrepareEvent for a function URL event, whose headers,
// body and path are shaped as an HTTP API event's.
func prepareURLEvent(f lambdafn.Function, raw []byte, w *demo.World, now time.Time, leaseID string) ([]byte, error) {
	var ev events.LambdaFunctionURLRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%s: event: %w", f.Name, err)
	}
	as := events.APIGatewayV2HTTPRequest{RawPath: ev.RawPath, Headers: ev.Headers, Body: ev.Body, IsBase64Encoded: ev.IsBase64Encoded}
	if err := w.PrepareWithLease(&as, now, leaseID); err != nil {
		return nil, err
	}
	ev.Headers, ev.Body = as.Headers, as.Body
	return json.Marshal(ev)
}

// Streamed is a function URL's streamed answer, gathered whole: what
// `byorelay invoke` prints for a KindStream function.
type Streamed struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body"`
}

// streamSeparator ends the JSON prelude of a function URL's streaming
// response (application/vnd.awslambda.http-integration-response).
var streamSeparator = make([]byte, 8)

// DecodeStreamed reads what a response-streaming function wrote (its JSON
// prelude, eight NUL bytes, the body), as an emulator hands it back.
func DecodeStreamed(raw []byte) (Streamed, error) {
	prelude, body, ok := bytes.Cut(raw, streamSeparator)
	if !ok {
		return Streamed{}, fmt.Errorf("not a streaming response (no prelude): %.200q", raw)
	}
	var out Streamed
	if err := json.Unmarshal(prelude, &out); err != nil {
		return Streamed{}, fmt.Errorf("streaming response prelude: %w", err)
	}
	out.Body = string(body)
	return out, nil
}

// InvokeInProcess runs one event through f's handler in this process, on
// st: what `byorelay invoke -in-process` does where the emulator cannot
// run. The answer is the JSON the function would have returned.
func InvokeInProcess(ctx context.Context, st *lambdafn.Stack, f lambdafn.Function, event []byte) ([]byte, error) {
	if f.Kind == lambdafn.KindSchedule {
		var ev json.RawMessage = event
		rep, err := st.SweepHandler()(ctx, ev)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rep)
	}
	if f.Kind == lambdafn.KindStream {
		var ev events.LambdaFunctionURLRequest
		if err := json.Unmarshal(event, &ev); err != nil {
			return nil, err
		}
		resp, err := lambdaurl.Wrap(st.AttachHandler())(ctx, &ev)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		return json.Marshal(Streamed{StatusCode: resp.StatusCode, Headers: resp.Headers, Body: string(body)})
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(event, &ev); err != nil {
		return nil, err
	}
	h, err := st.Handler(f.Name)
	if err != nil {
		return nil, err
	}
	resp, err := h(ctx, ev)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}
