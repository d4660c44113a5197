package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
)

// Waker sets one-time EventBridge Scheduler wake-ups for the sweeper.
//
// Why it earns its place: a claim opens a 10 s awaiting-payload window. If
// the site never seals and no device claims, heartbeats or polls pending
// afterwards, nothing in-line notices, and the job (and its pair's
// unsealed slot) waits for the periodic sweep. The periodic schedule can
// then stay slow (a backstop that costs nothing while the relay is idle)
// and the sweeper still runs soon after a deadline that matters.
//
// Wake-ups are bucketed to the minute (Scheduler's precision for at()
// expressions) and named by their bucket, so every replica asking for the
// same minute creates one schedule: the second create is a
// ConflictException, which means it is already set. Each schedule deletes
// itself after it fires.
//
// The scheduler client is built by the first wake-up, not by NewWaker:
// only a claim that grants a job sets one, and a function's init builds no
// client it may not call.
type Waker struct {
	api     func() *scheduler.Client
	group   string
	target  string
	role    string
	clock   clock.Clock
	mu      sync.Mutex
	created map[string]time.Time // names this container set, until they fire
}

// NewWaker sets wake-ups in schedule group that invoke the sweeper
// targetARN as roleARN, with cfg's region and credentials and the store's
// clock as time source. endpoint overrides Scheduler's regional endpoint
// (a local stand-in); "" takes cfg.BaseEndpoint, and without that the
// region's.
func NewWaker(cfg aws.Config, endpoint, group, targetARN, roleARN string, clk clock.Clock) *Waker {
	api := sync.OnceValue(func() *scheduler.Client {
		return scheduler.NewFromConfig(cfg, func(o *scheduler.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
		})
	})
	return &Waker{api: api, group: group, target: targetARN, role: roleARN, clock: clk, created: map[string]time.Time{}}
}

// WakeupInput is the sweeper's event payload when a wake-up fires.
const WakeupInput = `{"trigger":"wakeup"}`

// Wake makes sure the sweeper runs at or shortly after at: the first whole
// minute not before at, and never in the past.
func (w *Waker) Wake(ctx context.Context, at time.Time) error {
	now := w.clock.Now().UTC()
	bucket := at.UTC().Truncate(time.Minute)
	if bucket.Before(at) {
		bucket = bucket.Add(time.Minute)
	}
	if !bucket.After(now) {
		bucket = now.Truncate(time.Minute).Add(time.Minute)
	}
	name := "wake-" + bucket.Format("20060102T1504")

	w.mu.Lock()
	for n, b := range w.created {
		if !b.After(now) {
			delete(w.created, n)
		}
	}
	_, done := w.created[name]
	w.mu.Unlock()
	if done {
		return nil
	}

	if err := w.create(ctx, name, bucket); err != nil {
		return err
	}
	w.mu.Lock()
	w.created[name] = bucket
	w.mu.Unlock()
	return nil
}

// create sets the one-time schedule name for bucket. A ConflictException
// is success: another replica, or this one, set it already.
func (w *Waker) create(ctx context.Context, name string, bucket time.Time) error {
	_, err := w.api().CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name:                       aws.String(name),
		GroupName:                  aws.String(w.group),
		ActionAfterCompletion:      types.ActionAfterCompletionDelete,
		Description:                aws.String("byorelay sweeper wake-up for a claim deadline"),
		FlexibleTimeWindow:         &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		ScheduleExpression:         aws.String("at(" + bucket.Format("2006-01-02T15:04:05") + ")"),
		ScheduleExpressionTimezone: aws.String("UTC"),
		Target:                     &types.Target{Arn: aws.String(w.target), RoleArn: aws.String(w.role), Input: aws.String(WakeupInput)},
	})
	if _, ok := errors.AsType[*types.ConflictException](err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create wake-up %s: %w", name, err)
	}
	return nil
}
