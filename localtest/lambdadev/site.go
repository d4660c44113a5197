package lambdadev

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/sitefn"
)

// PrepareSiteEvent is PrepareEvent for a site-stack function: an HTTP
// event gets the demo's values, leaseID for {{leaseId}} (demo.SiteLease)
// and fresh signatures; the sweeper's schedule payload goes as it is.
func PrepareSiteEvent(f sitefn.Function, raw []byte, w *demo.World, now time.Time, leaseID string) ([]byte, error) {
	if f.Kind != sitefn.KindHTTP {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("%s: event is not JSON", f.Name)
		}
		return raw, nil
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%s: event: %w", f.Name, err)
	}
	if err := w.PrepareSite(&ev, now, leaseID); err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}

// InvokeSiteInProcess runs one event through a site function's handler in
// this process, on st. The answer is the JSON the function would have
// returned: the sweeper returns nothing but its error, so its answer is
// null, as the runtime reports it.
func InvokeSiteInProcess(ctx context.Context, st *sitefn.Stack, f sitefn.Function, event []byte) ([]byte, error) {
	if f.Kind == sitefn.KindSchedule {
		if err := st.SweepHandler()(ctx); err != nil {
			return nil, err
		}
		return []byte("null"), nil
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
