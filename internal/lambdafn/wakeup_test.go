package lambdafn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// The claim function sets a wake-up for the first awaiting-payload window
// its answer opened, as the store stamped it (the default window and a
// configured one), and none for a claim that granted nothing. Open from
// environment variables, as a Lambda container does; DynamoDB Local holds
// the jobs, moto plays Scheduler.
func TestClaimWakesTheSweeperAtTheAwaitingDeadline(t *testing.T) {
	for _, tc := range []struct {
		name, awaiting string
		window         time.Duration
	}{
		{"default window", "", store.AwaitingPayloadMs * time.Millisecond},
		{"configured window", "70000", 70 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ddb := localtest.DynamoEndpoint(t)
			moto := localtest.MotoEndpoint(t)
			localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "scheduler": moto})
			world, err := demo.Load(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			table := localtest.UniqueName("wakeup")
			if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
				t.Fatal(err)
			}
			sched := motoScheduler(t)
			group := localtest.UniqueName("claim-wakeups")
			if _, err := sched.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(group)}); err != nil {
				t.Fatal(err)
			}
			env, err := LoadEnv(envOf(map[string]string{
				"TABLE_NAME": table, "AWAITING_PAYLOAD_MS": tc.awaiting,
				"WAKEUP_GROUP": group, "SWEEPER_ARN": "arn:aws:lambda:us-east-1:123456789012:function:sweeper",
				"WAKEUP_ROLE_ARN": "arn:aws:iam::123456789012:role/wakeup",
			}))
			if err != nil {
				t.Fatal(err)
			}
			// :05 past a minute: neither window ends on a whole minute.
			clk := clock.NewManual(time.Now().UTC().Truncate(time.Minute).Add(5 * time.Second))
			st, err := Open(env, Options{Clock: clk, MetricsOut: io.Discard, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			enqueue, _ := st.Handler(Enqueue)
			claim, _ := st.Handler(Claim)
			caps := []protocol.Capability{{Kind: "llm.generate", Service: "local", BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: "private"}}
			claimOnce := func() string {
				req := relaytest.SignedDaemonRequest(t, world.Daemon, demo.RunnerID, "claim", clk.Now(),
					protocol.ClaimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: demo.RunnerID, Capabilities: caps, Max: 1})
				resp, err := claim(ctx, eventOf(t, req))
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("claim: %d %s %v", resp.StatusCode, resp.Body, err)
				}
				return resp.Body
			}
			schedules := func() []string {
				list, err := sched.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(group)})
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, s := range list.Schedules {
					names = append(names, aws.ToString(s.Name))
				}
				return names
			}

			if body := claimOnce(); !strings.Contains(body, `"jobs":[]`) {
				t.Fatalf("an empty queue granted %s", body)
			}
			if got := schedules(); len(got) != 0 {
				t.Fatalf("a claim that granted nothing set %v", got)
			}

			stub := protocol.JobStub{ID: "job-a", Kind: "llm.generate", Owner: demo.Owner, Site: world.Site.KeyID(),
				Audience: "private", SizeClass: "small", DeadlineAt: clk.Now().Add(time.Hour).UnixMilli()}
			req := relaytest.SignedSiteRequest(t, world.Site, demo.SiteID, "enqueue", clk.Now(),
				protocol.EnqueueRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: demo.SiteID, Stub: stub})
			if resp, err := enqueue(ctx, eventOf(t, req)); err != nil || resp.StatusCode != 200 {
				t.Fatalf("enqueue: %d %s %v", resp.StatusCode, resp.Body, err)
			}
			if body := claimOnce(); strings.Count(body, `"lease"`) != 1 {
				t.Fatalf("claim granted %s", body)
			}
			bucket := clk.Now().Add(tc.window).Truncate(time.Minute).Add(time.Minute)
			want := "wake-" + bucket.Format("20060102T1504")
			if got := schedules(); len(got) != 1 || got[0] != want {
				t.Fatalf("schedules %v, want %s (the minute after the awaiting deadline)", got, want)
			}
			got, err := sched.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(want), GroupName: aws.String(group)})
			if err != nil {
				t.Fatal(err)
			}
			if expr := aws.ToString(got.ScheduleExpression); expr != "at("+bucket.Format("2006-01-02T15:04:05")+")" {
				t.Errorf("expression %s", expr)
			}
		})
	}
}

func motoScheduler(t *testing.T) *scheduler.Client {
	t.Helper()
	return scheduler.NewFromConfig(localtest.AWSConfig(localtest.MotoEndpoint(t)))
}
