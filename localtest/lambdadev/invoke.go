package lambdadev

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/lambdafn"
	"github.com/byorelay/byorelay/localtest/demo"
)

// PrepareEvent makes a sample event for f sendable at now: an HTTP event
// gets the demo's values and fresh signatures (demo.World.Prepare); a
// schedule payload goes as it is.
func PrepareEvent(f lambdafn.Function, raw []byte, w *demo.World, now time.Time) ([]byte, error) {
	if f.Kind != lambdafn.KindHTTP {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("%s: event is not JSON", f.Name)
		}
		return raw, nil
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%s: event: %w", f.Name, err)
	}
	if err := w.Prepare(&ev, now); err != nil {
		return nil, err
	}
	return json.Marshal(ev)
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
