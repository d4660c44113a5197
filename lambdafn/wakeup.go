package lambdafn

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/lambdafn/awscall"
	"github.com/byorelay/byorelay/store"
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
// It creates a schedule with one signed call to Scheduler's REST API
// (awscall), not the SDK's scheduler client: only the claim and catch-all
// functions set wake-ups, and that client's package initialisation (its
// endpoint table alone about 0.1-0.2 ms and 80 KB) ran at every cold start
// of every relay function.
type Waker struct {
	api     *awscall.Client
	group   string
	target  string
	role    string
	clock   store.Clock
	mu      sync.Mutex
	created map[string]time.Time // names this container set, until they fire
}

// NewWaker sets wake-ups in schedule group that invoke the sweeper
// targetARN as roleARN, with cfg's region and credentials and the store's
// clock as time source. endpoint overrides Scheduler's regional endpoint
// (a local stand-in); "" takes cfg.BaseEndpoint, and without that the
// region's.
func NewWaker(cfg aws.Config, endpoint, group, targetARN, roleARN string, clock store.Clock) *Waker {
	return &Waker{api: awscall.New(cfg, "scheduler", endpoint), group: group, target: targetARN, role: roleARN, clock: clock, created: map[string]time.Time{}}
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

// schedule is CreateSchedule's request body (the fields it sets; the
// schedule's name is in the path).
type schedule struct {
	ActionAfterCompletion      string
	Description                string
	FlexibleTimeWindow         struct{ Mode string }
	GroupName                  string
	ScheduleExpression         string
	ScheduleExpressionTimezone string
	Target                     struct{ Arn, RoleArn, Input string }
}

// create sets the one-time schedule name for bucket. A ConflictException
// is success: another replica, or this one, set it already.
func (w *Waker) create(ctx context.Context, name string, bucket time.Time) error {
	var in schedule
	in.ActionAfterCompletion = "DELETE"
	in.Description = "byorelay sweeper wake-up for a claim deadline"
	in.FlexibleTimeWindow.Mode = "OFF"
	in.GroupName = w.group
	in.ScheduleExpression = "at(" + bucket.Format("2006-01-02T15:04:05") + ")"
	in.ScheduleExpressionTimezone = "UTC"
	in.Target.Arn, in.Target.RoleArn, in.Target.Input = w.target, w.role, WakeupInput
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	// The name is wake-<digits>T<digits>: nothing in it needs escaping.
	reply, err := w.api.PostPath(ctx, "/schedules/"+name, http.Header{"Content-Type": {"application/json"}}, body, 64<<10)
	if err != nil {
		return fmt.Errorf("create wake-up %s: %w", name, err)
	}
	if reply.StatusCode == http.StatusOK {
		return nil
	}
	// REST-JSON errors: {"Message": ...}, the type in the body's __type
	// or only in the X-Amzn-ErrorType header, which awscall does not keep;
	// the service says ConflictException with 409, a stand-in (moto) with
	// 400 and the type in the body. Either is "already set".
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"Message"`
	}
	_ = json.Unmarshal(reply.Body, &e)
	if i := strings.LastIndexByte(e.Type, '#'); i >= 0 {
		e.Type = e.Type[i+1:]
	}
	if reply.StatusCode == http.StatusConflict || e.Type == "ConflictException" {
		return nil
	}
	return fmt.Errorf("create wake-up %s: %s %s: %s", name, reply.Status, e.Type, e.Message)
}

// earliestClaimDeadline is the first awaiting-payload deadline a claim
// answer opened: each granted lease was stamped at expiresAt - leaseMs by
// the store clock, and the site has AwaitingPayloadMs from then to seal.
// false when the answer granted nothing (or is not a claim answer).
func earliestClaimDeadline(body []byte) (time.Time, bool) {
	var resp struct {
		Jobs []struct {
			Lease struct {
				ExpiresAt int64 `json:"expiresAt"`
			} `json:"lease"`
		} `json:"jobs"`
		LeaseMs int64 `json:"leaseMs"`
	}
	if json.Unmarshal(body, &resp) != nil || len(resp.Jobs) == 0 {
		return time.Time{}, false
	}
	var first int64
	for i, j := range resp.Jobs {
		due := j.Lease.ExpiresAt - resp.LeaseMs + store.AwaitingPayloadMs
		if i == 0 || due < first {
			first = due
		}
	}
	return time.UnixMilli(first), true
}
