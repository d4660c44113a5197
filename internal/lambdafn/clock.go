package lambdafn

import (
	"context"
	"log/slog"
	"time"
)

// Calibrate returns once the store clock has read DynamoDB's, or has
// tried: while it has no reading, each call makes one read (half a read
// unit), one at a time. Every handler calls it first, so a cold container
// stamps nothing with its host's skew
// (docs/decisions/0012-one-time-source.md); a failure costs only timeliness: the clock reads the host
// until a store call answers, and the sweep calibrates again before it
// decides any expiry. A caller serving the relay or st.Store by another
// path (`byorelay serve`'s stream and admin routes) calls it once before
// serving.
//
// The read is made by the first request, not started at Open: begun in the
// background at init it competed with the rest of the init for the CPU
// (its first SDK call, signing and connection are about 1.4 ms of CPU),
// which lengthened init by about a third of a hello-world's under the
// emulator; the first request waits for one round trip either way. A
// container whose first request reads the grant key from SSM starts this
// read just before that one, so the two round trips overlap.
func (st *Stack) Calibrate(ctx context.Context) {
	if st.serverClock == nil {
		return // an injected clock: nothing to learn
	}
	if st.serverClock.Reading().Calibrated {
		return
	}
	st.calibrateMu.Lock()
	defer st.calibrateMu.Unlock()
	if st.serverClock.Reading().Calibrated {
		return
	}
	if err := st.Store.CalibrateClock(ctx); err != nil {
		st.log.WarnContext(ctx, "store clock not calibrated", slog.String("problem", err.Error()))
	}
}

// noteClock publishes the store clock's reading, at most once a minute per
// container: enough for the alarm, and not a metric line per request.
func (st *Stack) noteClock() {
	if st.serverClock == nil {
		return
	}
	now := time.Now() // paces a metric; decides nothing
	st.clockMu.Lock()
	due := st.clockNoted.IsZero() || now.Sub(st.clockNoted) >= time.Minute
	if due {
		st.clockNoted = now
	}
	st.clockMu.Unlock()
	if due {
		st.Metrics.Clock(st.serverClock.Reading())
	}
}
