package lambdafn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// SweepEvent is the payload EventBridge Scheduler sends the sweeper: the
// template's periodic schedule sends {"trigger":"schedule"}, a wake-up
// {"trigger":"wakeup"}. Anything else (a console test event) sweeps too.
type SweepEvent struct {
	Trigger string `json:"trigger,omitempty"`
}

// SweepReport is the sweeper's answer, visible in an invoke's output and in
// the function's log.
type SweepReport struct {
	Trigger  string `json:"trigger"`
	Requeued int    `json:"requeued"`
	Removed  int    `json:"removed"`
}

// SweepHandler is the sweeper as a Lambda handler. A failed sweep is a
// failed invocation (the Scheduler retries it, and the template's alarm on
// SweepFailures and on the function's errors fires), never a quiet success.
func (st *Stack) SweepHandler() func(ctx context.Context, ev json.RawMessage) (SweepReport, error) {
	return func(ctx context.Context, ev json.RawMessage) (SweepReport, error) {
		var in SweepEvent
		_ = json.Unmarshal(ev, &in) // an unknown payload still means "sweep"
		if in.Trigger == "" {
			in.Trigger = "invoke"
		}
		r, err := st.Relay(ctx)
		if err != nil {
			return SweepReport{}, fmt.Errorf("sweep: %w", err)
		}
		st.Calibrate(ctx)
		res, err := r.Sweep(ctx)
		st.noteClock()
		if err != nil {
			st.Metrics.SweepFailed()
			st.log.ErrorContext(ctx, "sweep failed", slog.String("trigger", in.Trigger), slog.String("problem", err.Error()))
			return SweepReport{}, fmt.Errorf("sweep: %w", err)
		}
		rep := SweepReport{Trigger: in.Trigger, Requeued: len(res.Requeued), Removed: len(res.Removed)}
		st.log.InfoContext(ctx, "sweep done", slog.String("trigger", rep.Trigger),
			slog.Int("requeued", rep.Requeued), slog.Int("removed", rep.Removed))
		return rep, nil
	}
}
