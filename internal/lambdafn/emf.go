package lambdafn

import (
	"io"
	"sync"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/platform/emf"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/store"
)

// EMF is the relay's metrics hook written as CloudWatch embedded metric
// format: one JSON line per event on the function's stdout, which Lambda's
// log agent turns into metrics with no API call and no added latency.
//
// Dimensions are kept to bounded sets (function, endpoint, error code,
// operation): a dimension per site or owner would be a metric per tenant,
// billed per metric. Who churned goes in the record as a plain property,
// searchable in Logs Insights, and in full to the churn topic.
type EMF struct {
	mu        sync.Mutex
	out       io.Writer
	namespace string
	function  string
	clock     clock.Clock
}

var _ relay.Metrics = (*EMF)(nil)

// Metric names, as they appear in CloudWatch and in the template's alarms.
const (
	MetricClaims         = "Claims"
	MetricJobsGranted    = "JobsGranted"
	MetricGrants         = "Grants"
	MetricGrantsDeclined = "GrantsDeclined"
	MetricRefusals       = "Refusals"
	MetricConflicts      = "Conflicts"
	MetricSweeps         = "Sweeps"
	MetricSweepRequeued  = "SweepRequeued"
	MetricSweepRemoved   = "SweepRemoved"
	MetricSweepFailures  = "SweepFailures"
	// MetricSweepBacklog is the age in seconds of the oldest due entry a
	// scheduled sweep found; MetricSweepFailedItems the due items it went
	// on past.
	MetricSweepBacklog     = "SweepBacklogSeconds"
	MetricSweepFailedItems = "SweepFailedItems"
	MetricChurn            = "UnsealedChurn"
	// MetricEnvelopeDeleteFailures counts the envelope object deletes
	// that failed, one per object and attempt (dynamo.Config's
	// OnObjectDeleteFailed); the template alarms when the sweeper's keep
	// failing.
	MetricEnvelopeDeleteFailures = "EnvelopeDeleteFailures"
	// The store clock against DynamoDB's (ddb.ServerClock): the offset
	// (DynamoDB's minus the host's) and its uncertainty, in milliseconds.
	// The sweep decides no expiry while the uncertainty is above
	// ddb.MaxClockUncertainty; the template alarms on both.
	MetricClockOffset      = "ClockOffsetMs"
	MetricClockUncertainty = "ClockUncertaintyMs"
)

// NewEMF writes EMF records to out under namespace, each dimensioned by
// function (the Lambda's name; "" for one process serving them all) and
// stamped from clock.
func NewEMF(out io.Writer, namespace, function string, clk clock.Clock) *EMF {
	if function == "" {
		function = "local"
	}
	return &EMF{out: out, namespace: namespace, function: function, clock: clk}
}

// Claimed implements relay.Metrics.
func (m *EMF) Claimed(jobs int) {
	m.emit(nil, nil, metric{MetricClaims, 1}, metric{MetricJobsGranted, float64(jobs)})
}

// Granted implements relay.Metrics.
func (m *EMF) Granted() { m.emit(nil, nil, metric{MetricGrants, 1}) }

// Declined implements relay.Metrics: dimensioned by reason, a set bounded
// by the grant law's words, and by whether the decline was final.
func (m *EMF) Declined(reason string, permanent bool) {
	m.emit([]string{"Reason", "Permanent"}, map[string]any{"Reason": reason, "Permanent": boolString(permanent)},
		metric{MetricGrantsDeclined, 1})
}

// Refused implements relay.Metrics.
func (m *EMF) Refused(endpoint, code string) {
	m.emit([]string{"Endpoint", "Code"}, map[string]any{"Endpoint": endpoint, "Code": code}, metric{MetricRefusals, 1})
}

// Conflict implements relay.Metrics.
func (m *EMF) Conflict(operation string) {
	m.emit([]string{"Operation"}, map[string]any{"Operation": operation}, metric{MetricConflicts, 1})
}

// Swept implements relay.Metrics.
func (m *EMF) Swept(requeued, removed int) {
	m.emit(nil, nil, metric{MetricSweeps, 1},
		metric{MetricSweepRequeued, float64(requeued)}, metric{MetricSweepRemoved, float64(removed)})
}

// SweepFailed counts a sweeper run that failed; the template alarms on it.
func (m *EMF) SweepFailed() {
	m.emit(nil, nil, metric{MetricSweepFailures, 1})
}

// SweepBacklog publishes a scheduled sweep's backlog (the oldest due
// entry's age) and the due items it failed; the template alarms on the
// backlog.
func (m *EMF) SweepBacklog(seconds float64, failedItems int) {
	m.emit(nil, nil, metric{MetricSweepBacklog, seconds}, metric{MetricSweepFailedItems, float64(failedItems)})
}

// EnvelopeDeleteFailed counts one envelope object whose delete failed.
func (m *EMF) EnvelopeDeleteFailed() {
	m.emit(nil, nil, metric{MetricEnvelopeDeleteFailures, 1})
}

// Churn implements relay.Metrics.
func (m *EMF) Churn(c store.UnsealedChurn) {
	m.emit(nil, map[string]any{"site": c.SiteID, "owner": c.Owner, "expiries": c.Expiries, "windowMs": c.WindowMs},
		metric{MetricChurn, 1})
}

// Clock publishes the store clock's offset from DynamoDB's. An
// uncalibrated clock publishes nothing: it has no offset to report, and the
// sweep's refusals (SweepFailures) already say so.
func (m *EMF) Clock(r ddb.ClockReading) {
	if !r.Calibrated {
		return
	}
	m.emit(nil, map[string]any{"clockResets": r.Resets},
		metric{MetricClockOffset, float64(r.Offset.Milliseconds())},
		metric{MetricClockUncertainty, float64(r.Uncertainty.Milliseconds())})
}

type metric struct {
	name  string
	value float64
}

// units are the metrics that are not counts, by name.
var units = map[string]string{MetricClockOffset: "Milliseconds", MetricClockUncertainty: "Milliseconds"}

// emit writes one record. Every metric is also published without the extra
// dimensions (the Function-only set), so an alarm can watch the total.
func (m *EMF) emit(dims []string, props map[string]any, ms ...metric) {
	sets := [][]string{{"Function"}}
	if len(dims) > 0 {
		sets = append(sets, append([]string{"Function"}, dims...))
	}
	rec := make(map[string]any, len(props)+1)
	for k, v := range props {
		rec[k] = v
	}
	rec["Function"] = m.function
	metrics := make([]emf.Metric, len(ms))
	for i, x := range ms {
		metrics[i] = emf.Metric{Name: x.name, Unit: units[x.name], Value: x.value}
	}
	line := emf.Line(m.namespace, sets, rec, m.clock.Now(), metrics...)
	m.mu.Lock()
	defer m.mu.Unlock()
	// A metric that cannot be written is lost, not an error: the request
	// it describes has already been decided.
	_, _ = m.out.Write(line)
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
