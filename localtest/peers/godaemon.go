package peers

import (
	"context"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/protocol"
)

// RunGoDaemon pairs a Go daemon configured by cfg with the world's relay
// (fresh keys, approved for Owner through the admin API) and runs it until
// the test ends. RelayURL and Keys are set here; a heartbeat interval of
// 500 ms and waits of at most 100 ms (the relay asks pairing polls to wait
// 2 s; a test need not) are set unless cfg sets its own.
func (w *World) RunGoDaemon(t testing.TB, cfg daemon.Config, label string) *daemon.Daemon {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RelayURL, cfg.Keys = w.Origin, keys
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(d, 100*time.Millisecond)):
				return nil
			}
		}
	}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if _, err := d.Pair(ctx, label, func(c daemon.PairCode) { w.Approve(t, c.UserCode) }); err != nil {
		stop()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return d
}
