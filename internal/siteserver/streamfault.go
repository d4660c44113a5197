package siteserver

import (
	"context"
	"log/slog"

	site "github.com/byorelay/byorelay/client/site"
)

// streamFault logs a cloud-lane stream fault (docs/streaming.md, "Faults
// heard") and hands it to Config.OnStreamFault, which counts it where the
// server runs (sitefn: an EMF metric). A failed checkpoint write is a
// warning, not an error: the stream goes on and the next cadence tries
// again; what the operator needs is to see them add up.
func (s *Server) streamFault(f site.StreamFault) {
	attrs := []slog.Attr{slog.String("kind", string(f.Kind)), slog.String("job", f.JobID),
		slog.String("lease", f.LeaseID), slog.String("reason", f.Reason)}
	if f.Err != nil {
		attrs = append(attrs, slog.String("error", f.Err.Error()))
	}
	s.log.LogAttrs(context.Background(), slog.LevelWarn, "stream fault", attrs...)
	if s.onStreamFault != nil {
		s.onStreamFault(f)
	}
}
