package lambdafn

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/lambdafn/awscall"
	"github.com/byorelay/byorelay/store"
)

// churnPublishTimeout bounds a report: the store calls OnChurn inside the
// sweep or claim that crossed the threshold, so a slow SNS would hold up a
// device's claim.
const churnPublishTimeout = 2 * time.Second

// ChurnPublisher sends unsealed-churn reports to an SNS topic, where an
// operator (or an automated block) subscribes.
//
// It publishes with one signed call to SNS's Query API (awscall), not the
// SDK's sns client: a report is rare, and that client's package
// initialisation cost every relay function ~0.3 ms and 270 KB at every cold
// start.
type ChurnPublisher struct {
	sns   *awscall.Client
	topic string
	log   *slog.Logger
}

// NewChurnPublisher publishes to topicARN with cfg's region and
// credentials. endpoint overrides SNS's regional endpoint (a local
// stand-in); "" takes cfg.BaseEndpoint, and without that the region's.
func NewChurnPublisher(cfg aws.Config, endpoint, topicARN string, log *slog.Logger) *ChurnPublisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ChurnPublisher{sns: awscall.New(cfg, "sns", endpoint), topic: topicARN, log: log}
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
	ctx, cancel := context.WithTimeout(context.Background(), churnPublishTimeout)
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
	form := url.Values{
		"Action":                         {"Publish"},
		"Version":                        {"2010-03-31"},
		"TopicArn":                       {p.topic},
		"Subject":                        {"byorelay: unsealed churn from site " + subjectSafe(c.SiteID, 60)},
		"Message":                        {string(body)},
		"MessageAttributes.entry.1.Name": {"type"},
		"MessageAttributes.entry.1.Value.DataType":    {"String"},
		"MessageAttributes.entry.1.Value.StringValue": {ChurnMessageType},
	}
	reply, err := p.sns.Post(ctx, http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}, []byte(form.Encode()), 64<<10)
	if err != nil {
		return fmt.Errorf("sns Publish: %w", err)
	}
	if reply.StatusCode != http.StatusOK {
		// The Query API answers a refusal with an XML ErrorResponse.
		var e struct {
			Code    string `xml:"Error>Code"`
			Message string `xml:"Error>Message"`
		}
		_ = xml.Unmarshal(reply.Body, &e)
		return fmt.Errorf("sns Publish: %s %s: %s", reply.Status, e.Code, e.Message)
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
