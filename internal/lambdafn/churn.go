package lambdafn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/byorelay/byorelay/store"
)

// churnPublishTimeout bounds a report: the store calls OnChurn inside the
// sweep or claim that crossed the threshold, so a slow SNS would hold up a
// device's claim.
const churnPublishTimeout = 2 * time.Second

// ChurnPublisher sends unsealed-churn reports to an SNS topic, where an
// operator (or an automated block) subscribes.
//
// The sns client is built by the first report, not by NewChurnPublisher:
// a report is rare, and a function's init builds no client it may not
// call.
type ChurnPublisher struct {
	sns   func() *sns.Client
	topic string
	log   *slog.Logger
	// timeout bounds one report: churnPublishTimeout, except in tests,
	// whose stand-in SNS on a loaded machine can take longer than a real
	// one ever should, and would then drop the report they look for.
	timeout time.Duration
}

// NewChurnPublisher publishes to topicARN with cfg's region and
// credentials. endpoint overrides SNS's regional endpoint (a local
// stand-in); "" takes cfg.BaseEndpoint, and without that the region's.
func NewChurnPublisher(cfg aws.Config, endpoint, topicARN string, log *slog.Logger) *ChurnPublisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	api := sync.OnceValue(func() *sns.Client {
		return sns.NewFromConfig(cfg, func(o *sns.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
		})
	})
	return &ChurnPublisher{sns: api, topic: topicARN, log: log, timeout: churnPublishTimeout}
}

// ChurnMessage is the JSON body of a churn report on the topic.
type ChurnMessage struct {
	Type     string `json:"type"`
	SiteID   string `json:"siteId"`
	Owner    string `json:"owner"`
	Expiries int    `json:"expiries"`
	WindowMs int64  `json:"windowMs"`
}

// ChurnMessageType is ChurnMessage.Type, and the message attribute "type"
// subscribers can filter on.
const ChurnMessageType = "byorelay.unsealed-churn"

// Publish sends one report. A failure is logged and dropped: the store has
// already recorded the churn and the log line carries it, and the store's
// callback has no error to return.
func (p *ChurnPublisher) Publish(c store.UnsealedChurn) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := p.publish(ctx, c); err != nil {
		p.log.Error("churn report not published",
			slog.String("site", c.SiteID), slog.String("owner", c.Owner), slog.String("problem", err.Error()))
	}
}

func (p *ChurnPublisher) publish(ctx context.Context, c store.UnsealedChurn) error {
	body, err := json.Marshal(ChurnMessage{Type: ChurnMessageType, SiteID: c.SiteID, Owner: c.Owner, Expiries: c.Expiries, WindowMs: c.WindowMs})
	if err != nil {
		return err
	}
	_, err = p.sns().Publish(ctx, &sns.PublishInput{
		TopicArn: aws.String(p.topic),
		Subject:  aws.String("byorelay: unsealed churn from site " + subjectSafe(c.SiteID, 60)),
		Message:  aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"type": {DataType: aws.String("String"), StringValue: aws.String(ChurnMessageType)},
		},
	})
	if err != nil {
		return fmt.Errorf("sns Publish: %w", err)
	}
	return nil
}

// subjectSafe keeps an SNS subject valid whatever a site id holds: SNS
// refuses a subject over 100 characters or with anything but printable
// ASCII, and a refused publish would lose the report.
func subjectSafe(s string, n int) string {
	out := make([]byte, 0, n)
	for i := 0; i < len(s) && len(out) < n; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			out = append(out, c)
		} else {
			out = append(out, '?')
		}
	}
	return string(out)
}
