package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// idleHeartbeat is the daemon's default heartbeat period (the byollm
// daemon's DEFAULT_HEARTBEAT_MS); an idle daemon heartbeats and asks for
// work once a period.
const idleHeartbeat = 10 * time.Second

// IdlePhase is the fleet with nothing queued: every daemon heartbeating
// and claiming at the default period. What it costs a daemon-second is
// what an idle fleet puts on each key.
type IdlePhase struct {
	Daemons    int     `json:"daemons"`
	Seconds    float64 `json:"seconds"`
	Heartbeats int64   `json:"heartbeats"`
	Claims     int64   `json:"claims"`
	Failed     int64   `json:"failed"`
	// Capacity is by function, Keys by partition key (the report keeps
	// only the hottest).
	Capacity map[string]Capacity `json:"capacity,omitempty"`
	Keys     map[string]Capacity `json:"-"`
	Errors   []string            `json:"errors,omitempty"`
}

// DaemonSeconds is the phase's daemons times its length.
func (p *IdlePhase) DaemonSeconds() float64 { return float64(p.Daemons) * p.Seconds }

// runIdle runs every daemon of w idle on t for length: daemon i of D
// starts i/D of a period in, so the fleet's requests are spread evenly over
// each period as jittered daemons' are, then heartbeats and claims once a
// period until the phase ends.
func runIdle(ctx context.Context, t target, w *world, length time.Duration) IdlePhase {
	c := newClient(t.origin())
	before, keysBefore := t.capacity(), t.keyCapacity()
	var heartbeats, claims, failed counter
	var mu sync.Mutex
	var errs []string
	fail := func(err error) {
		failed.add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 5 {
			errs = append(errs, err.Error())
		}
	}
	start := time.Now()
	end := start.Add(length)
	var wg sync.WaitGroup
	for i, d := range w.daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c.worker()
			defer c.close()
			next := start.Add(idleHeartbeat * time.Duration(i) / time.Duration(len(w.daemons)))
			for next.Before(end) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				if _, err := c.daemonCall(ctx, d, "heartbeat", protocol.HeartbeatRequest{
					ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, DaemonVersion: "0.1.1",
					Capabilities: []protocol.Capability{capability}, Withheld: []protocol.WithheldKind{}, ActiveLeases: []protocol.GrantRef{},
				}); err != nil {
					fail(err)
				} else {
					heartbeats.add(1)
				}
				raw, err := c.daemonCall(ctx, d, "claim", protocol.ClaimRequest{
					ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID,
					Capabilities: []protocol.Capability{capability}, Max: 1,
				})
				var claimed protocol.ClaimResponse
				switch {
				case err != nil:
					fail(err)
				case json.Unmarshal(raw, &claimed) != nil || len(claimed.Jobs) > 0:
					fail(fmt.Errorf("idle claim: %s was handed work with nothing queued: %.200s", d.runnerID, raw))
				default:
					claims.add(1)
				}
				next = next.Add(idleHeartbeat)
			}
		}()
	}
	wg.Wait()
	// The phase is its length: every request of it started inside it, and
	// a daemon whose turn falls past the end (a phase shorter than a
	// period) rightly sends nothing.
	p := IdlePhase{Daemons: len(w.daemons), Seconds: length.Seconds(),
		Heartbeats: heartbeats.load(), Claims: claims.load(), Failed: failed.load(), Errors: errs}
	if after := t.capacity(); after != nil {
		p.Capacity = capacitySince(after, before)
		delete(p.Capacity, notFunction)
		p.Keys = capacitySince(t.keyCapacity(), keysBefore)
	}
	return p
}
