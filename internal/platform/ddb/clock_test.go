package ddb

import (
	"net/http"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
)

// start is where every test's host clock begins.
var start = time.Date(2026, time.November, 29, 8, 0, 0, 0, time.UTC)

// respond feeds c one response from a server whose clock reads host+offset,
// sent at the host's current instant and received rtt later.
func respond(c *ServerClock, host *clock.Manual, offset, rtt time.Duration) {
	sent := host.Now()
	received := host.Advance(rtt)
	// The server stamps Date somewhere inside the round trip, truncated to
	// the second as HTTP dates are.
	stamped := sent.Add(rtt / 2).Add(offset)
	c.observe(sent, received, stamped.UTC().Format(http.TimeFormat))
}

func TestServerClockIsTheUncertainHostUntilAResponse(t *testing.T) {
	host := clock.NewManual(start)
	c := NewServerClock(host)
	if !c.Now().Equal(host.Now()) {
		t.Fatalf("uncalibrated Now %v, host %v", c.Now(), host.Now())
	}
	if r := c.Reading(); r.Calibrated || c.Settled() {
		t.Fatalf("a clock that has seen no response is calibrated: %+v", r)
	}
	c.observe(host.Now(), host.Now(), "not a date")
	if c.Settled() {
		t.Fatal("a response without a usable Date calibrated the clock")
	}
}

func TestOneResponseBoundsTheTrueOffsetWithinASecond(t *testing.T) {
	host := clock.NewManual(start.Add(300 * time.Millisecond))
	c := NewServerClock(host)
	const offset = -15*time.Second - 250*time.Millisecond // the host runs 15.25 s fast
	respond(c, host, offset, 80*time.Millisecond)
	r := c.Reading()
	if !r.Calibrated || r.Uncertainty > MaxClockUncertainty || !c.Settled() {
		t.Fatalf("one 80 ms response: %+v, want calibrated within %v", r, MaxClockUncertainty)
	}
	if d := (r.Offset - offset).Abs(); d > r.Uncertainty {
		t.Fatalf("true offset %v is %v from the estimate %v, outside the uncertainty %v", offset, d, r.Offset, r.Uncertainty)
	}
}

func TestPhasedResponsesNarrowTheOffsetToTheRoundTrip(t *testing.T) {
	host := clock.NewManual(start)
	c := NewServerClock(host)
	const offset = 15*time.Second + 370*time.Millisecond
	for range 40 {
		respond(c, host, offset, 20*time.Millisecond)
		host.Advance(137 * time.Millisecond) // calls land at every phase of the second
	}
	r := c.Reading()
	if r.Uncertainty > 50*time.Millisecond {
		t.Fatalf("40 responses with 20 ms round trips left the offset uncertain by %v", r.Uncertainty)
	}
	if d := (r.Offset - offset).Abs(); d > r.Uncertainty {
		t.Fatalf("true offset %v, estimate %v ± %v", offset, r.Offset, r.Uncertainty)
	}
	if got, want := c.Now(), host.Now().Add(offset); got.Sub(want).Abs() > r.Uncertainty {
		t.Fatalf("Now %v, DynamoDB's clock %v", got, want)
	}
}

func TestAHostClockStepIsRelearnedFromTheNextResponse(t *testing.T) {
	host := clock.NewManual(start)
	c := NewServerClock(host)
	for range 10 {
		respond(c, host, 2*time.Second, 20*time.Millisecond)
		host.Advance(290 * time.Millisecond)
	}
	host.Advance(10 * time.Second) // the host's clock is stepped 10 s forward
	respond(c, host, 2*time.Second-10*time.Second, 20*time.Millisecond)
	r := c.Reading()
	if r.Resets != 1 {
		t.Fatalf("a 10 s step went unnoticed: %+v", r)
	}
	if d := (r.Offset - -8*time.Second).Abs(); d > r.Uncertainty || !c.Settled() {
		t.Fatalf("after the step the offset is %v ± %v, want -8s", r.Offset, r.Uncertainty)
	}
}

func TestUncertaintyGrowsWithTimeSinceTheLastResponse(t *testing.T) {
	host := clock.NewManual(start)
	c := NewServerClock(host)
	respond(c, host, 0, 10*time.Millisecond)
	before := c.Reading().Uncertainty
	host.Advance(time.Hour)
	if got, want := c.Reading().Uncertainty-before, drift(time.Hour); got != want {
		t.Fatalf("an hour without a response added %v of uncertainty, want %v", got, want)
	}
}
