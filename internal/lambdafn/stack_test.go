package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// eventOf is the API Gateway event for a signed test request, shaped as
// API Gateway shapes it: lower-case header names, repeated headers
// comma-joined, a UTF-8 body as text. (localtest/apiserver builds the full
// event for the local server, but it imports this package.)
func eventOf(t *testing.T, r relay.Request) events.APIGatewayV2HTTPRequest {
	t.Helper()
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "$default",
		RawPath:        r.Path,
		RawQueryString: r.RawQuery,
		Headers:        map[string]string{"host": "example.com"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default",
			HTTP:  events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: r.Method, Path: r.Path},
		},
	}
	for k, vs := range r.Header {
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	if !utf8.Valid(r.Body) {
		t.Fatalf("eventOf: body is not UTF-8: %q", r.Body)
	}
	ev.Body = string(r.Body)
	return ev
}

// A site that claims and never seals, end to end through the deployed
// wiring (Open from environment variables, as a Lambda container does):
// each claim sets a sweeper wake-up in EventBridge Scheduler, the sweeper
// requeues then evicts, and the sixth unsealed expiry is published to the
// churn topic. DynamoDB Local holds the state; moto plays Scheduler and
// SNS; the clock is moved by hand.
func TestUnsealedClaimsWakeTheSweeperAndReportChurn(t *testing.T) {
	ctx := context.Background()
	ddb := localtest.DynamoEndpoint(t)
	moto := localtest.MotoEndpoint(t)
	localtest.LambdaEnv(t, map[string]string{"dynamodb": ddb, "sns": moto, "scheduler": moto})

	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := "stack-" + time.Now().Format("150405.000000")
	if err := world.Seed(ctx, dynamodb.NewFromConfig(localtest.AWSConfig(ddb)), table); err != nil {
		t.Fatal(err)
	}
	snsAPI := sns.NewFromConfig(localtest.AWSConfig(moto))
	// Topic and schedule group of their own, as in the churn publisher's
	// test: an earlier run's subscriber is gone.
	topic, err := snsAPI.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(localtest.UniqueName("stack-churn"))})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan string, 4)
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct{ Type, Message string }
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &n) == nil && n.Type == "Notification" {
			reports <- n.Message
		}
	}))
	defer sub.Close()
	if _, err := snsAPI.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("http"), Endpoint: aws.String(sub.URL)}); err != nil {
		t.Fatal(err)
	}
	sched := scheduler.NewFromConfig(localtest.AWSConfig(moto))
	group := localtest.UniqueName("stack-wakeups")
	if _, err := sched.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(group)}); err != nil {
		t.Fatal(err)
	}

	env, err := LoadEnv(envOf(map[string]string{
		"TABLE_NAME": table, "CHURN_TOPIC_ARN": aws.ToString(topic.TopicArn),
		"WAKEUP_GROUP": group, "SWEEPER_ARN": "arn:aws:lambda:us-east-1:123456789012:function:sweeper",
		"WAKEUP_ROLE_ARN": "arn:aws:iam::123456789012:role/wakeup",
	}))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now().UTC().Truncate(time.Minute).Add(5 * time.Second))
	var metrics bytes.Buffer
	st, err := Open(env, Options{Clock: clk, MetricsOut: &metrics, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.churn.timeout = motoTimeout
	enqueue, _ := st.Handler(Enqueue)
	claim, _ := st.Handler(Claim)
	sweep := st.SweepHandler()

	deadline := clk.Now().Add(time.Hour).UnixMilli()
	for _, id := range []string{"job-a", "job-b"} {
		stub := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: demo.Owner, Site: world.Site.KeyID(),
			Audience: "private", SizeClass: "small", DeadlineAt: deadline}
		req := relaytest.SignedSiteRequest(t, world.Site, demo.SiteID, "enqueue", clk.Now(),
			protocol.EnqueueRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: demo.SiteID, Stub: stub})
		resp, err := enqueue(ctx, eventOf(t, req))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("enqueue %s: %d %s %v", id, resp.StatusCode, resp.Body, err)
		}
	}

	caps := []protocol.Capability{{Kind: "llm.generate", Service: "local", BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: "private"}}
	// SealAttemptsBeforeEviction rounds of two unsealed grants: requeued,
	// requeued, evicted. Six expiries inside the churn window.
	for round := 1; round <= store.SealAttemptsBeforeEviction; round++ {
		req := relaytest.SignedDaemonRequest(t, world.Daemon, demo.RunnerID, "claim", clk.Now(),
			protocol.ClaimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: demo.RunnerID, Capabilities: caps, Max: 2})
		resp, err := claim(ctx, eventOf(t, req))
		if err != nil || resp.StatusCode != 200 || strings.Count(resp.Body, `"lease"`) != 2 {
			t.Fatalf("round %d claim: %d %s %v", round, resp.StatusCode, resp.Body, err)
		}
		// The awaiting window closes 10 s after the grant, never on a whole
		// minute here (the clock starts at :05): the wake-up is for the next
		// whole minute.
		due := clk.Now().Add(store.AwaitingPayloadMs * time.Millisecond)
		name := "wake-" + due.Truncate(time.Minute).Add(time.Minute).Format("20060102T1504")
		if _, err := sched.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(name), GroupName: aws.String(group)}); err != nil {
			t.Fatalf("round %d: no wake-up %s after a claim that granted work: %v", round, name, err)
		}

		clk.Advance(store.AwaitingPayloadMs*time.Millisecond + time.Second)
		rep, err := sweep(ctx, json.RawMessage(`{"trigger":"wakeup"}`))
		if err != nil {
			t.Fatal(err)
		}
		// The grants' windows ended a second before the sweep, so its
		// backlog is at least that (a pair set's check may be older).
		if rep.BacklogSeconds < 1 || rep.BacklogSeconds > 60 {
			t.Fatalf("round %d sweep backlog %v s, want between 1 and 60", round, rep.BacklogSeconds)
		}
		rep.BacklogSeconds = 0
		want := SweepReport{Trigger: "wakeup", Requeued: 2}
		if round == store.SealAttemptsBeforeEviction {
			want = SweepReport{Trigger: "wakeup", Removed: 2}
		}
		if rep != want {
			t.Fatalf("round %d sweep = %+v, want %+v", round, rep, want)
		}
	}

	select {
	case msg := <-reports:
		var m ChurnMessage
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			t.Fatalf("report %q: %v", msg, err)
		}
		if m.SiteID != demo.SiteID || m.Owner != demo.Owner || m.Expiries < store.ChurnExpiries {
			t.Errorf("report = %+v", m)
		}
	case <-time.After(time.Minute): // moto delivers in milliseconds; a loaded machine may take seconds
		t.Fatal("no churn report reached the topic's subscriber")
	}
	for _, want := range []string{`"UnsealedChurn":1`, `"JobsGranted":2`, `"SweepRemoved":2`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics.String())
		}
	}
}
