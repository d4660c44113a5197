package wakeup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	schedtypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/wakeup"
	"github.com/byorelay/byorelay/localtest"
)

// Against moto's Scheduler.
func TestWakerSetsOneSelfDeletingScheduleAtTheDeadline(t *testing.T) {
	ctx := context.Background()
	api := scheduler.NewFromConfig(localtest.AWSConfig(localtest.MotoEndpoint(t)))
	group := "wake-" + strings.ReplaceAll(t.Name(), "/", "-")
	if _, err := api.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(group)}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 9, 0, 50, 0, time.UTC)
	clk := clock.NewManual(now)
	target := "arn:aws:lambda:us-east-1:123456789012:function:sweeper"
	role := "arn:aws:iam::123456789012:role/wakeup"
	input := `{"trigger":"wakeup"}`
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	w := wakeup.New(cfg, wakeup.Config{Group: group, TargetARN: target, RoleARN: role, Input: input, Prefix: "wake-", Clock: clk})

	// A deadline 10 s out lands in the next whole minute.
	if err := w.Wake(ctx, now.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := api.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String("wake-20261129T0901"), GroupName: aws.String(group)})
	if err != nil {
		t.Fatalf("the wake-up schedule is not there: %v", err)
	}
	if aws.ToString(got.ScheduleExpression) != "at(2026-11-29T09:01:00)" || aws.ToString(got.ScheduleExpressionTimezone) != "UTC" {
		t.Errorf("expression = %s %s", aws.ToString(got.ScheduleExpression), aws.ToString(got.ScheduleExpressionTimezone))
	}
	if got.Target == nil || aws.ToString(got.Target.Arn) != target || aws.ToString(got.Target.RoleArn) != role ||
		aws.ToString(got.Target.Input) != input {
		t.Errorf("target = %+v", got.Target)
	}
	if got.ActionAfterCompletion != schedtypes.ActionAfterCompletionDelete {
		t.Errorf("action after completion = %q, want DELETE (one-time schedules must not pile up)", got.ActionAfterCompletion)
	}

	// Another replica (its own Waker, no memory of the first) asking for
	// the same minute finds it set: no error, still one schedule.
	other := wakeup.New(cfg, wakeup.Config{Group: group, TargetARN: target, RoleARN: role, Input: input, Prefix: "wake-", Clock: clk})
	if err := other.Wake(ctx, now.Add(5*time.Second)); err != nil {
		t.Fatalf("second replica: %v", err)
	}
	// A deadline already past is woken for at the next minute, never in
	// the past.
	clk.Set(now.Add(2 * time.Minute))
	if err := w.Wake(ctx, now); err != nil {
		t.Fatal(err)
	}
	list, err := api.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(group)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Schedules {
		names = append(names, aws.ToString(s.Name))
	}
	if strings.Join(names, ",") != "wake-20261129T0901,wake-20261129T0903" &&
		strings.Join(names, ",") != "wake-20261129T0903,wake-20261129T0901" {
		t.Errorf("schedules = %v, want the 09:01 wake-up once and the 09:03 one", names)
	}
}

// A refusal other than "already set" is an error the claim logs, naming
// what Scheduler said.
func TestWakerReportsARefusedSchedule(t *testing.T) {
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	now := time.Date(2026, 11, 29, 9, 0, 50, 0, time.UTC)
	w := wakeup.New(cfg, wakeup.Config{Group: "no-such-group-" + strings.ReplaceAll(t.Name(), "/", "-"),
		TargetARN: "arn:aws:lambda:us-east-1:123456789012:function:sweeper", RoleARN: "arn:aws:iam::123456789012:role/wakeup",
		Prefix: "wake-", Clock: clock.NewManual(now)})
	err := w.Wake(context.Background(), now.Add(10*time.Second))
	if err == nil || !strings.Contains(err.Error(), "wake-20261129T0901") {
		t.Fatalf("err = %v, want the refused wake-up named", err)
	}
}
