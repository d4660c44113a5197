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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/store"
)

// motoTimeout bounds a report to moto's SNS in tests. moto posts to an
// HTTP subscriber inside the Publish call, in Python, so on a loaded
// machine the call can outlast churnPublishTimeout, and the publisher
// would drop the very report the test waits for (or log a timeout, not
// the refusal).
const motoTimeout = time.Minute

// The report reaches a subscriber of the topic: moto's SNS delivers to an
// HTTP subscription, which this test serves.
func TestChurnPublisherReachesTheTopicsSubscribers(t *testing.T) {
	ctx := context.Background()
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	api := sns.NewFromConfig(cfg)
	// A topic of its own: moto stops delivering a publish at the first
	// subscriber it cannot reach, and an earlier run's (-count, one moto
	// for the whole run) is gone.
	topic, err := api.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(localtest.UniqueName("churn-test"))})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var n map[string]any
		if json.Unmarshal(b, &n) == nil && n["Type"] == "Notification" {
			got <- n
		}
	}))
	defer srv.Close()
	if _, err := api.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("http"), Endpoint: aws.String(srv.URL)}); err != nil {
		t.Fatal(err)
	}

	p := NewChurnPublisher(cfg, "", aws.ToString(topic.TopicArn), nil)
	p.timeout = motoTimeout
	p.Publish(store.UnsealedChurn{
		SiteID: "site\nwith a newline", Owner: "alice", Expiries: 6, WindowMs: store.ChurnWindowMs,
	})

	select {
	case n := <-got:
		var msg ChurnMessage
		if err := json.Unmarshal([]byte(n["Message"].(string)), &msg); err != nil {
			t.Fatalf("message is not a ChurnMessage: %v", n["Message"])
		}
		want := ChurnMessage{Type: ChurnMessageType, SiteID: "site\nwith a newline", Owner: "alice", Expiries: 6, WindowMs: store.ChurnWindowMs}
		if msg != want {
			t.Errorf("message = %+v, want %+v", msg, want)
		}
		if n["Subject"] != "byorelay: unsealed churn from site site?with a newline" {
			t.Errorf("subject = %q", n["Subject"])
		}
	case <-time.After(time.Minute): // moto delivers in milliseconds; a loaded machine may take seconds
		t.Fatal("no notification reached the subscriber")
	}
}

// A refusal from SNS is an error naming it, and Publish logs it: the report
// is not dropped silently.
func TestChurnPublisherReportsTheServicesRefusal(t *testing.T) {
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	var logged bytes.Buffer
	p := NewChurnPublisher(cfg, "", "arn:aws:sns:us-east-1:123456789012:no-such-topic", slog.New(slog.NewJSONHandler(&logged, nil)))
	p.timeout = motoTimeout
	c := store.UnsealedChurn{SiteID: "s", Owner: "o", Expiries: 6, WindowMs: store.ChurnWindowMs}
	err := p.publish(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("publish to a missing topic = %v, want SNS's NotFound refusal", err)
	}
	p.Publish(c)
	if !strings.Contains(logged.String(), "churn report not published") || !strings.Contains(logged.String(), "NotFound") {
		t.Errorf("log = %s, want the refusal logged", logged.String())
	}
}

func TestSubjectSafeKeepsSubjectsSNSAccepts(t *testing.T) {
	if got := subjectSafe("a\x00b\u00e9", 60); got != "a?b??" {
		t.Errorf("subjectSafe = %q", got)
	}
	if got := subjectSafe("0123456789", 4); got != "0123" {
		t.Errorf("subjectSafe = %q", got)
	}
}
