package store

import (
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

// SystemClock is the host clock. In Lambda that is disciplined by Amazon Time
// Sync, which keeps replicas within the ~1 s the protocol's wall-clock
// retry-after values need.
type SystemClock struct{}

// Now returns the host time.
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a clock tests move by hand, so no test sleeps through a
// lease. Safe for concurrent use: a store's background work and the test
// goroutine both read it.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current instant.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, backwards included.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d and returns the new instant.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// EpochMs is t as epoch milliseconds, the unit of every time the store holds
// and the wire carries.
func EpochMs(t time.Time) int64 { return t.UnixMilli() }
