package byorelay_test

import (
	"testing"

	"github.com/byorelay/byorelay/internal/lambdafn"
)

// The template alarms on the sweeper's backlog: the metric the sweeper
// writes (lambdafn.MetricSweepBacklog), on the sweeper's own dimension,
// into the alarm topic. Without it a sweeper that falls behind is seen
// only once claims stall on lapsed leases.
func TestTheTemplateAlarmsOnTheSweepBacklog(t *testing.T) {
	p := parseTemplate(t)
	props := at(p.resource(t, "SweepBacklogAlarm"), "Properties")
	if props == nil {
		t.Fatal("SweepBacklogAlarm has no Properties")
	}
	for field, want := range map[string]string{
		"Namespace":          "byorelay",
		"MetricName":         lambdafn.MetricSweepBacklog,
		"Statistic":          "Maximum",
		"ComparisonOperator": "GreaterThanThreshold",
		"Threshold":          "900",
		"TreatMissingData":   "notBreaching",
	} {
		if got := at(props, field); got == nil || got.Value != want {
			t.Errorf("SweepBacklogAlarm %s = %v, want %q", field, got, want)
		}
	}
	dims := at(props, "Dimensions")
	if dims == nil || len(dims.Content) != 1 {
		t.Fatal("SweepBacklogAlarm should have one dimension, the sweeper function")
	}
	d := dims.Content[0]
	if name, v := at(d, "Name"), at(d, "Value"); name == nil || name.Value != "Function" || v == nil || v.Tag != "!Ref" || v.Value != "SweeperFunction" {
		t.Errorf("SweepBacklogAlarm dimension is not Function = !Ref SweeperFunction")
	}
	if a := at(props, "AlarmActions"); a == nil || len(a.Content) != 1 || a.Content[0].Value != "AlarmTopic" {
		t.Errorf("SweepBacklogAlarm does not notify the AlarmTopic")
	}
}
