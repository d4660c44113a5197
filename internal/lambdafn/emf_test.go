package lambdafn

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/store"
)

type emfRecord struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
	Values map[string]any `json:"-"`
}

func readEMF(t *testing.T, out *bytes.Buffer) []emfRecord {
	t.Helper()
	var recs []emfRecord
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r emfRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if err := json.Unmarshal([]byte(line), &r.Values); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// Each record must be one a CloudWatch agent accepts: every metric and
// every dimension named in the directive present as a top-level member.
func checkEMF(t *testing.T, r emfRecord) {
	t.Helper()
	if len(r.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("directives = %d", len(r.AWS.CloudWatchMetrics))
	}
	d := r.AWS.CloudWatchMetrics[0]
	for _, set := range d.Dimensions {
		for _, dim := range set {
			if _, ok := r.Values[dim].(string); !ok {
				t.Errorf("dimension %s is not a string member: %v", dim, r.Values[dim])
			}
		}
	}
	for _, m := range d.Metrics {
		if _, ok := r.Values[m.Name].(float64); !ok {
			t.Errorf("metric %s is not a number member: %v", m.Name, r.Values[m.Name])
		}
		if want := map[string]string{MetricClockOffset: "Milliseconds", MetricClockUncertainty: "Milliseconds"}[m.Name]; m.Unit != want && (want != "" || m.Unit != "Count") {
			t.Errorf("metric %s unit %q", m.Name, m.Unit)
		}
	}
}

func TestEMFWritesOneValidRecordPerEvent(t *testing.T) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	m := NewEMF(&out, "byorelay", "byorelay-claim", clock.NewManual(at))
	m.Claimed(2)
	m.Granted()
	m.Declined("not-a-member", true)
	m.Refused("claim", "unauthorized")
	m.Conflict("claim")
	m.Swept(3, 1)
	m.SweepFailed()
	m.Churn(store.UnsealedChurn{SiteID: "s", Owner: "o", Expiries: 6, WindowMs: 300000})
	m.Clock(ddb.ClockReading{})
	m.Clock(ddb.ClockReading{Offset: -15*time.Second - 250*time.Millisecond, Uncertainty: 40 * time.Millisecond, Calibrated: true, Resets: 1})
	m.EnvelopeDeleteFailed()

	recs := readEMF(t, &out)
	if len(recs) != 10 {
		t.Fatalf("records = %d, want 10 (an uncalibrated clock publishes nothing)", len(recs))
	}
	for _, r := range recs {
		checkEMF(t, r)
		if r.AWS.Timestamp != at.UnixMilli() {
			t.Errorf("timestamp %d, want the injected clock's %d", r.AWS.Timestamp, at.UnixMilli())
		}
		if r.AWS.CloudWatchMetrics[0].Namespace != "byorelay" || r.Values["Function"] != "byorelay-claim" {
			t.Errorf("namespace/function = %s/%v", r.AWS.CloudWatchMetrics[0].Namespace, r.Values["Function"])
		}
	}
	if recs[0].Values[MetricClaims] != 1.0 || recs[0].Values[MetricJobsGranted] != 2.0 {
		t.Errorf("claim record = %v", recs[0].Values)
	}
	if recs[2].Values["Reason"] != "not-a-member" || recs[2].Values["Permanent"] != "true" || recs[2].Values[MetricGrantsDeclined] != 1.0 {
		t.Errorf("decline record = %v", recs[2].Values)
	}
	if got := recs[2].AWS.CloudWatchMetrics[0].Dimensions; len(got) != 2 || len(got[1]) != 3 || got[1][1] != "Reason" {
		t.Errorf("decline dimensions = %v, want the total and the per-reason set", got)
	}
	refusal := recs[3]
	if refusal.Values["Endpoint"] != "claim" || refusal.Values["Code"] != "unauthorized" {
		t.Errorf("refusal record = %v", refusal.Values)
	}
	if got := refusal.AWS.CloudWatchMetrics[0].Dimensions; len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 3 {
		t.Errorf("refusal dimensions = %v, want the total and the per-endpoint-code set", got)
	}
	if recs[5].Values[MetricSweepRequeued] != 3.0 || recs[5].Values[MetricSweepRemoved] != 1.0 {
		t.Errorf("sweep record = %v", recs[5].Values)
	}
	if rec := recs[8]; rec.Values[MetricClockOffset] != -15250.0 || rec.Values[MetricClockUncertainty] != 40.0 {
		t.Errorf("clock record = %v", rec.Values)
	}
	if rec := recs[9]; rec.Values[MetricEnvelopeDeleteFailures] != 1.0 || len(rec.AWS.CloudWatchMetrics[0].Dimensions) != 1 {
		t.Errorf("envelope delete record = %v, want one failure on the Function dimension alone", rec.Values)
	}
	churn := recs[7]
	if churn.Values["site"] != "s" || churn.Values["owner"] != "o" {
		t.Errorf("churn record = %v", churn.Values)
	}
	for _, set := range churn.AWS.CloudWatchMetrics[0].Dimensions {
		for _, d := range set {
			if d == "site" || d == "owner" {
				t.Errorf("churn dimensioned by %s: a metric per tenant", d)
			}
		}
	}
}
