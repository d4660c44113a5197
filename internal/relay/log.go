package relay

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/byorelay/byorelay/store"
)

// What goes in a log record: request id, endpoint, site, runner, job and
// the decision. Never an envelope, a key or a signature: the relay is blind,
// and a log that held ciphertext or a signature would be a second place to
// leak from.

type requestIDKey struct{}

// WithRequestID attaches the id the caller's infrastructure gave this
// request (API Gateway's, Lambda's) so every record names it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// requestIDFrom returns the id WithRequestID attached, or "".
func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestIDHeaders are tried, in order, when the context carries no id.
var requestIDHeaders = []string{"X-Request-Id", "X-Amzn-Request-Id", "X-Amzn-Requestid"}

// ChurnReporter is a store.Options.OnChurn that logs the pair and counts
// it. An honest site never produces this shape, so it is logged at warn:
// worth waking somebody for.
func ChurnReporter(log *slog.Logger, m Metrics) func(store.UnsealedChurn) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NopMetrics{}
	}
	return func(c store.UnsealedChurn) {
		log.Warn("unsealed churn",
			slog.String("site", c.SiteID),
			slog.String("owner", c.Owner),
			slog.Int("expiries", c.Expiries),
			slog.Int64("windowMs", c.WindowMs),
			slog.String("decision", "report-churn"))
		m.Churn(c)
	}
}

// noteSweep logs and counts what a sweep moved, both halves: a log that
// mentions requeues and never removals reports a shrinking queue with no
// reason for it.
func (r *Relay) noteSweep(ctx context.Context, trigger string, res store.SweepResult) {
	if len(res.Requeued) == 0 && len(res.Removed) == 0 {
		return
	}
	r.metrics.Swept(len(res.Requeued), len(res.Removed))
	r.logSweep(ctx, trigger, res)
}

// sweepLapsed runs the targeted half of a request's in-line sweep on a
// store whose in-line sweep reads only part of what is due
// (store.LapseSweeper), and notes what it moved. Nothing named, nothing
// read.
func (r *Relay) sweepLapsed(c *call, trigger string, in store.LapsedInput) error {
	sweeper, ok := r.store.(store.LapseSweeper)
	if !ok || (len(in.Grants) == 0 && in.SiteID == "") {
		return nil
	}
	res, err := sweeper.SweepLapsed(c.ctx, in)
	if err != nil {
		return err
	}
	r.noteSweep(c.ctx, trigger, res)
	return nil
}

// logSweep logs each job a sweep moved, both halves.
func (r *Relay) logSweep(ctx context.Context, trigger string, res store.SweepResult) {
	for _, j := range res.Requeued {
		r.log.InfoContext(ctx, "sweep requeued job",
			slog.String("requestId", requestIDFrom(ctx)),
			slog.String("trigger", trigger),
			slog.String("site", j.SiteID),
			slog.String("job", j.ID),
			slog.Int("sealAttempts", j.SealAttempts),
			slog.String("decision", "requeue"))
	}
	for _, j := range res.Removed {
		r.log.InfoContext(ctx, "sweep removed job",
			slog.String("requestId", requestIDFrom(ctx)),
			slog.String("trigger", trigger),
			slog.String("site", j.SiteID),
			slog.String("job", j.ID),
			slog.String("state", string(j.State)),
			slog.String("decision", "remove"))
	}
}

// slogError names why a body was refused: the decoder's path and problem,
// never the body itself.
func slogError(err error) slog.Attr { return slog.String("problem", clip(err.Error())) }

// maxLoggedBytes bounds a caller-chosen string in a log line: a header or
// a field can be megabytes, and a log line of megabytes is cost (and, past
// CloudWatch's 256 KB, a truncated record) the caller chose for us.
const maxLoggedBytes = 256

// clip is s, cut to maxLoggedBytes with its full length said.
func clip(s string) string {
	if len(s) <= maxLoggedBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxLoggedBytes], "") + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
