// Package clock is the one time source of this module: the Clock interface
// every store, relay and client reads, the host clock, a clock tests move by
// hand, and the one context-aware sleep.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock is the one time source for every deadline a store stamps or
// enforces: lease expiry, the awaiting-payload window, retry-after, presence,
// sweep due-times, pairing-code expiry.
//
// The store owns it; callers never pass an instant in. A lease granted by a
// replica whose clock runs fast is short, and the same lease swept by one
// whose clock runs slow outlives it: nobody is wrong and the lease has no
// length. Request-signature freshness deliberately does not use this (it is
// a question about the caller's clock versus this process's).
type Clock interface {
	Now() time.Time
}

// System is the host clock. In Lambda that is disciplined by Amazon Time
// Sync, which keeps replicas within the ~1 s the protocol's wall-clock
// retry-after values need.
type System struct{}

// Now returns the host time.
func (System) Now() time.Time { return time.Now() }

// Manual is a clock tests move by hand, so no test sleeps through a lease.
// Safe for concurrent use: a store's background work and the test goroutine
// both read it.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a clock stopped at start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start}
}

// Now returns the clock's current instant.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, backwards included.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d and returns the new instant.
func (c *Manual) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// EpochMs is t as epoch milliseconds, the unit of every time the store holds
// and the wire carries.
func EpochMs(t time.Time) int64 { return t.UnixMilli() }

// Sleep waits d of real time, or until ctx is done, and then returns ctx's
// error (nil when the whole wait passed). It paces; it decides nothing, so
// it reads no Clock. The timer is stopped on the way out: a cancelled wait
// must not keep its timer until it would have fired.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
