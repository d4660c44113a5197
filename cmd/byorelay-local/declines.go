package main

import (
	"log/slog"
	"sync"

	"github.com/byorelay/byorelay/internal/relay"
)

// declineLog is the local stack's relay.Metrics: where a deployment counts
// grant declines in CloudWatch by reason, this counts them in the log, so
// an operator watching `serve` sees why work is waiting and how often. The
// other counts are the deployment's dashboards' and are not kept here.
type declineLog struct {
	relay.NopMetrics
	log    *slog.Logger
	mu     sync.Mutex
	counts map[string]int
}

func newDeclineLog(log *slog.Logger) *declineLog {
	return &declineLog{log: log, counts: map[string]int{}}
}

// Declined implements relay.Metrics: one record per decline, with how many
// this process has counted for the reason.
func (d *declineLog) Declined(reason string, permanent bool) {
	d.mu.Lock()
	d.counts[reason]++
	n := d.counts[reason]
	d.mu.Unlock()
	d.log.Info("grant declines", slog.String("reason", reason), slog.Bool("permanent", permanent), slog.Int("count", n))
}
