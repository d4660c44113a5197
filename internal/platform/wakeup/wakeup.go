// Package wakeup sets one-time EventBridge Scheduler wake-ups that invoke
// a function soon after a moment: the relay's sweeper after a claim's
// deadline, the site's pump after a pump that may have died.
package wakeup

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

// Config names the schedules a Waker sets and what they invoke.
type Config struct {
	// Group is the schedule group the wake-ups are created in.
	Group string
	// TargetARN is the function a wake-up invokes, as RoleARN, with Input
	// as its event.
	TargetARN, RoleARN, Input string
	// Prefix starts every schedule's name; the rest is its minute.
	Prefix string
	// Description is each schedule's, for a person reading the group.
	Description string
	// Endpoint overrides Scheduler's regional endpoint (a local stand-in);
	// "" takes the aws.Config's BaseEndpoint, and without that the
	// region's.
	Endpoint string
	// Clock is the time source: a wake-up is never set in its past.
	// Nil is the system clock.
	Clock clock.Clock
}

// Waker sets one-time wake-ups, bucketed to the minute (Scheduler's
// precision for at() expressions) and named by their bucket, so every
// replica asking for the same minute creates one schedule: the second
// create is a ConflictException, which means it is already set. Each
// schedule deletes itself after it fires, so none piles up.
//
// The scheduler client is built by the first wake-up, not by New: a
// function's init builds no client it may not call.
type Waker struct {
	api     func() *scheduler.Client
	cfg     Config
	mu      sync.Mutex
	created map[string]time.Time // names this container set, until they fire
}

// New sets wake-ups as c says, with cfg's region and credentials.
func New(cfg aws.Config, c Config) *Waker {
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	api := sync.OnceValue(func() *scheduler.Client {
		return scheduler.NewFromConfig(cfg, func(o *scheduler.Options) {
			if c.Endpoint != "" {
				o.BaseEndpoint = aws.String(c.Endpoint)
			}
		})
	})
	return &Waker{api: api, cfg: c, created: map[string]time.Time{}}
}

// Wake makes sure the target runs at or shortly after at: the first whole
// minute not before at, and never in the past.
func (w *Waker) Wake(ctx context.Context, at time.Time) error {
	now := w.cfg.Clock.Now().UTC()
	bucket := at.UTC().Truncate(time.Minute)
	if bucket.Before(at) {
		bucket = bucket.Add(time.Minute)
	}
	if !bucket.After(now) {
		bucket = now.Truncate(time.Minute).Add(time.Minute)
	}
	name := w.cfg.Prefix + bucket.Format("20060102T1504")

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
		GroupName:                  aws.String(w.cfg.Group),
		ActionAfterCompletion:      types.ActionAfterCompletionDelete,
		Description:                aws.String(w.cfg.Description),
		FlexibleTimeWindow:         &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		ScheduleExpression:         aws.String("at(" + bucket.Format("2006-01-02T15:04:05") + ")"),
		ScheduleExpressionTimezone: aws.String("UTC"),
		Target:                     &types.Target{Arn: aws.String(w.cfg.TargetARN), RoleArn: aws.String(w.cfg.RoleARN), Input: aws.String(w.cfg.Input)},
	})
	if _, ok := errors.AsType[*types.ConflictException](err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create wake-up %s: %w", name, err)
	}
	return nil
}
