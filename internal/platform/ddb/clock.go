package ddb

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/byorelay/byorelay/internal/platform/clock"
)

// ServerClock is a store clock bound to DynamoDB's: the host clock
// corrected by the offset between it and the Date header of DynamoDB's own
// responses. Every replica over one table then reads one time source, so a
// replica whose host runs 15 s fast does not requeue a lease that has 14 s
// left by everybody else's clock (docs/decisions/0012-one-time-source.md).
//
// Give it as a store's clock: store/dynamo's New then routes every call the
// store makes through it (Wrap), so each response narrows the offset, and
// the sweep refuses to decide an expiry while the offset is uncertain by
// more than MaxClockUncertainty (Settled).
//
// Date has one-second resolution. A response sent at host time s and
// received at r, dated D, says the server's clock read somewhere in
// [D, D+1s) at some instant in [s, r], so the offset (server minus host) is
// in [D-r, D+1s-s]: one second plus the round trip wide. Intersecting the
// intervals of successive responses (the second boundary falls at a
// different point of each) narrows it toward the round trip; an old
// interval is first widened by maxDrift for the time since it was taken. An
// empty intersection means a clock stepped: the clock starts again from the
// newest response alone.
type ServerClock struct {
	host clock.Clock

	mu sync.Mutex
	// lo and hi bound the offset as of host instant at; at is zero until
	// the first response.
	lo, hi time.Duration
	at     time.Time
	resets int
}

const (
	// MaxClockUncertainty is the widest half-interval of the offset at which
	// the sweep still decides expiries. One response with a round trip under
	// a second is enough: its interval is 1 s plus the round trip wide, so
	// half of it is under a second. Two replicas within it of DynamoDB's
	// clock are within 2 s of each other, a fifth of the 10 s awaiting
	// window and a thirtieth of the 60 s lease; without it they are as far
	// apart as their hosts.
	MaxClockUncertainty = time.Second
	// maxDrift is how fast a host clock may be assumed to run off once
	// measured: 100 ppm, far above what a disciplined clock does, so the
	// bound stays honest between responses (6 ms a minute).
	maxDrift = 100e-6
)

// NewServerClock returns a clock over host (nil: the system clock). Until a
// response has been seen it reads the host clock, and is uncertain.
func NewServerClock(host clock.Clock) *ServerClock {
	if host == nil {
		host = clock.System{}
	}
	return &ServerClock{host: host}
}

// Now is the host clock plus the middle of the offset interval.
func (c *ServerClock) Now() time.Time {
	now := c.host.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return now
	}
	return now.Add(c.lo + (c.hi-c.lo)/2)
}

// ClockReading is what a ServerClock knows of its offset, for a metric.
type ClockReading struct {
	// Offset is DynamoDB's clock minus the host's (the middle of the
	// interval); Uncertainty is half the interval's width, drift since the
	// last response included. Both are zero when Calibrated is false.
	Offset, Uncertainty time.Duration
	Calibrated          bool
	// Resets counts the times a response contradicted the interval (a clock
	// stepped) since the clock was made.
	Resets int
}

// Reading returns the clock's current offset and its uncertainty.
func (c *ServerClock) Reading() ClockReading {
	now := c.host.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return ClockReading{Resets: c.resets}
	}
	return ClockReading{
		Offset:      c.lo + (c.hi-c.lo)/2,
		Uncertainty: (c.hi-c.lo)/2 + drift(now.Sub(c.at)),
		Calibrated:  true,
		Resets:      c.resets,
	}
}

// Settled reports whether expiries may be decided by this clock now: it is
// calibrated and its uncertainty is at most MaxClockUncertainty.
func (c *ServerClock) Settled() bool {
	r := c.Reading()
	return r.Calibrated && r.Uncertainty <= MaxClockUncertainty
}

// observe narrows the offset with one response, sent and received at host
// instants sent and received and dated date.
func (c *ServerClock) observe(sent, received time.Time, date string) {
	d, err := http.ParseTime(date)
	if err != nil {
		return // no Date, or not HTTP's: nothing learned
	}
	lo, hi := d.Sub(received), d.Add(time.Second).Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() {
		grow := drift(received.Sub(c.at))
		if olo, ohi := c.lo-grow, c.hi+grow; olo <= hi && lo <= ohi {
			lo, hi = max(lo, olo), min(hi, ohi)
		} else {
			c.resets++
		}
	}
	c.lo, c.hi, c.at = lo, hi, received
}

func drift(elapsed time.Duration) time.Duration {
	if elapsed < 0 {
		elapsed = -elapsed
	}
	return time.Duration(float64(elapsed) * maxDrift)
}

// option is a per-call client option adding the middleware that times each
// attempt and reads its Date. It sits innermost in the deserialize step,
// next to the transport, so the interval it measures is the round trip
// alone, and every retry attempt is a sample of its own.
func (c *ServerClock) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("byorelay.ServerClock",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				sent := c.host.Now()
				out, md, err := next.HandleDeserialize(ctx, in)
				received := c.host.Now()
				if resp, ok := out.RawResponse.(*smithyhttp.Response); ok {
					c.observe(sent, received, resp.Header.Get("Date"))
				}
				return out, md, err
			}), middleware.After)
	})
}

// withClock is o and c's option, in a new slice: appending to the
// caller's could write into its backing array.
func withClock(o []func(*dynamodb.Options), c *ServerClock) []func(*dynamodb.Options) {
	return append(o[:len(o):len(o)], c.option)
}

// Wrap is api with every call passed through c's middleware, so each
// response narrows c's offset. A store whose clock is c wraps its client
// with it, so the clock and the client cannot be wired apart.
func (c *ServerClock) Wrap(api API) API { return &clocked{api: api, c: c} }

// clocked passes every call through c's option.
type clocked struct {
	api API
	c   *ServerClock
}

func (x *clocked) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return x.api.GetItem(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return x.api.PutItem(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return x.api.UpdateItem(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return x.api.DeleteItem(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return x.api.Query(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return x.api.Scan(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return x.api.BatchGetItem(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	return x.api.TransactGetItems(ctx, in, withClock(o, x.c)...)
}

func (x *clocked) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return x.api.TransactWriteItems(ctx, in, withClock(o, x.c)...)
}
