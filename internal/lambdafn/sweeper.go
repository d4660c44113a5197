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
	// Failed counts the due items the sweep could not handle and went on
	// past; BacklogSeconds is the oldest due entry's age when it started.
	Failed         int     `json:"failed"`
	BacklogSeconds float64 `json:"backlogSeconds"`
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
		stats, err := r.SweepPages(ctx)
		st.noteClock()
		rep := SweepReport{Trigger: in.Trigger, Requeued: stats.Requeued, Removed: stats.Removed,
			Failed: stats.Failed, BacklogSeconds: float64(stats.BacklogMs) / 1000}
		// Published on every run, failed or not: a sweeper falling behind
		// is seen by its backlog's age before the jobs it owes are missed.
		st.Metrics.SweepBacklog(rep.BacklogSeconds, rep.Failed)
		if err != nil {
			st.Metrics.SweepFailed()
			st.log.ErrorContext(ctx, "sweep failed", slog.String("trigger", in.Trigger),
				slog.Int("failedItems", rep.Failed), slog.String("problem", err.Error()))
			return SweepReport{}, fmt.Errorf("sweep: %w", err)
		}
		st.log.InfoContext(ctx, "sweep done", slog.String("trigger", rep.Trigger),
			slog.Int("requeued", rep.Requeued), slog.Int("removed", rep.Removed),
			slog.Float64("backlogSeconds", rep.BacklogSeconds))
		return rep, nil
	}
}
