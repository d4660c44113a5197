package main

import (
	"context"
	"io"
	"log/slog"
)

// serveLogger is serve's log: warnings and errors always; what the stack
// does once (an import, an approval, a sweep that moved something) unless
// --quiet; what it logs for every request only with -v, so the banner
// stays on the screen and a request that went wrong stands out.
func serveLogger(opts serveOptions, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case opts.quiet:
		level = slog.LevelWarn
	case opts.verbose:
		level = slog.LevelDebug
	}
	var h slog.Handler = slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	if !opts.verbose {
		h = withoutRequests{h}
	}
	return slog.New(h)
}

// perRequest are the records the relay writes at info for every request
// it answers: when deployed each is a CloudWatch line worth having, but on
// a terminal they are two lines a request.
var perRequest = map[string]bool{"request": true, "decision": true}

// withoutRequests drops the relay's per-request info records (perRequest)
// and passes everything else, every warning and error included.
type withoutRequests struct{ slog.Handler }

func (h withoutRequests) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && perRequest[r.Message] {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h withoutRequests) WithAttrs(attrs []slog.Attr) slog.Handler {
	return withoutRequests{h.Handler.WithAttrs(attrs)}
}

func (h withoutRequests) WithGroup(name string) slog.Handler {
	return withoutRequests{h.Handler.WithGroup(name)}
}

// reportedByBanner is the log for what the stack does before its banner
// and the banner then reports (the demo projection's import): warnings
// and errors only, unless -v. Its info records would otherwise print
// above the banner on every start and push the console link up the
// terminal.
func reportedByBanner(log *slog.Logger) *slog.Logger {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		return log
	}
	return slog.New(warningsOnly{log.Handler()})
}

// warningsOnly passes warnings and errors and drops the rest.
type warningsOnly struct{ slog.Handler }

func (h warningsOnly) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

func (h warningsOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warningsOnly{h.Handler.WithAttrs(attrs)}
}

func (h warningsOnly) WithGroup(name string) slog.Handler {
	return warningsOnly{h.Handler.WithGroup(name)}
}
