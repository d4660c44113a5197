package sitestore

import (
	"sync/atomic"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
)

// OffsetClock is a clock plus an offset that only moves forward: the store
// clock of a conformance target, whose advanceTime shifts every clock read
// the server makes (leases, TTLs, pairing expiry and signature freshness
// alike) without anyone sleeping. A production store runs with offset 0 and
// nothing can change it: Advance is reachable only from the test-only
// admin listener.
type OffsetClock struct {
	Base   clock.Clock
	offset atomic.Int64 // ms
}

// NewOffsetClock wraps base (nil means the host clock).
func NewOffsetClock(base clock.Clock) *OffsetClock {
	if base == nil {
		base = clock.System{}
	}
	return &OffsetClock{Base: base}
}

// Now is the base clock plus the offset.
func (c *OffsetClock) Now() time.Time {
	return c.Base.Now().Add(time.Duration(c.offset.Load()) * time.Millisecond)
}

// Advance moves the clock forward by ms.
func (c *OffsetClock) Advance(ms int64) {
	if ms > 0 {
		c.offset.Add(ms)
	}
}

// Reset returns the offset to zero.
func (c *OffsetClock) Reset() { c.offset.Store(0) }
