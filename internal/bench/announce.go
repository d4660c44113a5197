package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// announce heartbeats every daemon of w once, advertising capability, as a
// running daemon does every idleHeartbeat. With grants on, the relay's
// enqueue refuses a job as slot-waiting unless a live presence of the mapped
// owner advertises the mapped service, and a claim restores presence with
// no capabilities: without this a lifecycle phase with grants enqueues
// nothing.
func announce(ctx context.Context, c *client, w *world) error {
	var wg sync.WaitGroup
	errs := make([]error, len(w.daemons))
	for i, d := range w.daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c.worker()
			defer c.close()
			_, err := c.daemonCall(ctx, d, "heartbeat", protocol.HeartbeatRequest{
				ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, DaemonVersion: "0.1.1",
				Capabilities: []protocol.Capability{capability}, Withheld: []protocol.WithheldKind{}, ActiveLeases: []protocol.GrantRef{},
			})
			if err != nil {
				errs[i] = fmt.Errorf("heartbeat %s: %w", d.runnerID, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// keepAnnouncing announces every idleHeartbeat until stop closes, so
// presence stays live through a phase longer than its freshness bound.
func keepAnnouncing(ctx context.Context, c *client, w *world, stop <-chan struct{}) {
	t := time.NewTicker(idleHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			_ = announce(ctx, c, w)
		}
	}
}
