package byorelay_test

import (
	"testing"

	"github.com/byorelay/byorelay/internal/lambdafn"
)

// checkSweeperAlarm holds an alarm to the metric the sweeper writes: the
// fields given, the Globals' METRICS_NAMESPACE, the sweeper's own
// dimension, and the alarm topic.
func checkSweeperAlarm(t *testing.T, name string, fields map[string]string) {
	t.Helper()
	p := parseTemplate(t)
	props := at(p.resource(t, name), "Properties")
	if props == nil {
		t.Fatalf("%s has no Properties", name)
	}
	ns := at(p.root, "Globals", "Function", "Environment", "Variables", "METRICS_NAMESPACE")
	if ns == nil || at(props, "Namespace") == nil || at(props, "Namespace").Value != ns.Value {
		t.Errorf("%s reads a namespace other than the functions' METRICS_NAMESPACE", name)
	}
	for field, want := range fields {
		if got := at(props, field); got == nil || got.Value != want {
			t.Errorf("%s %s = %v, want %q", name, field, got, want)
		}
	}
	dims := at(props, "Dimensions")
	if dims == nil || len(dims.Content) != 1 {
		t.Fatalf("%s should have one dimension, the sweeper function", name)
	}
	d := dims.Content[0]
	if dim, v := at(d, "Name"), at(d, "Value"); dim == nil || dim.Value != "Function" || v == nil || v.Tag != "!Ref" || v.Value != "SweeperFunction" {
		t.Errorf("%s dimension is not Function = !Ref SweeperFunction", name)
	}
	if a := at(props, "AlarmActions"); a == nil || len(a.Content) != 1 || a.Content[0].Value != "AlarmTopic" {
		t.Errorf("%s does not notify the AlarmTopic", name)
	}
}

// The template alarms on the sweeper's backlog: the metric the sweeper
// writes (lambdafn.MetricSweepBacklog), on the sweeper's own dimension,
// into the alarm topic. Without it a sweeper that falls behind is seen
// only once claims stall on lapsed leases.
func TestTheTemplateAlarmsOnTheSweepBacklog(t *testing.T) {
	checkSweeperAlarm(t, "SweepBacklogAlarm", map[string]string{
		"Namespace":          "byorelay",
		"MetricName":         lambdafn.MetricSweepBacklog,
		"Statistic":          "Maximum",
		"ComparisonOperator": "GreaterThanThreshold",
		"Threshold":          "900",
		"TreatMissingData":   "notBreaching",
	})
}

// The template alarms when envelope object deletes keep failing: any
// failure (lambdafn.MetricEnvelopeDeleteFailures) in three of six periods
// on the sweeper, which retries every failed delete, and never on one
// period alone (a blip the retry absorbs). Without it a lost
// s3:DeleteObject grant leaves sealed envelopes in the bucket unseen.
func TestTheTemplateAlarmsOnFailingDeletes(t *testing.T) {
	checkSweeperAlarm(t, "EnvelopeDeleteFailuresAlarm", map[string]string{
		"MetricName":         lambdafn.MetricEnvelopeDeleteFailures,
		"Statistic":          "Sum",
		"ComparisonOperator": "GreaterThanOrEqualToThreshold",
		"Threshold":          "1",
		"Period":             "300",
		"EvaluationPeriods":  "6",
		"DatapointsToAlarm":  "3",
		"TreatMissingData":   "notBreaching",
	})
	props := at(parseTemplate(t).resource(t, "EnvelopeDeleteFailuresAlarm"), "Properties")
	if ok := at(props, "OKActions"); ok == nil || len(ok.Content) != 1 || ok.Content[0].Value != "AlarmTopic" {
		t.Errorf("EnvelopeDeleteFailuresAlarm does not say on the AlarmTopic when deletes work again")
	}
}
