package emf_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/emf"
)

// A record is one JSON line CloudWatch reads: the directive names each
// metric with its unit (Count when none is given) and every dimension set,
// and the record carries each metric's value and each property.
func TestALineIsOneRecordCloudWatchReads(t *testing.T) {
	line := emf.Line("ns", [][]string{{"Function"}, {"Function", "Code"}}, map[string]any{"Function": "claim", "Code": "not_found"},
		time.UnixMilli(1234), emf.Metric{Name: "Lag", Unit: "Milliseconds", Value: 7}, emf.Metric{Name: "Refusals", Value: 1})
	if len(line) == 0 || line[len(line)-1] != '\n' {
		t.Fatalf("line %q is not newline-terminated", line)
	}
	var rec struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Function, Code string
		Lag, Refusals  float64
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.AWS.Timestamp != 1234 || len(rec.AWS.CloudWatchMetrics) != 1 || rec.Function != "claim" || rec.Code != "not_found" || rec.Lag != 7 || rec.Refusals != 1 {
		t.Fatalf("record %s", line)
	}
	d := rec.AWS.CloudWatchMetrics[0]
	want := []struct{ Name, Unit string }{{"Lag", "Milliseconds"}, {"Refusals", "Count"}}
	if d.Namespace != "ns" || !reflect.DeepEqual(d.Dimensions, [][]string{{"Function"}, {"Function", "Code"}}) || !reflect.DeepEqual(d.Metrics, want) {
		t.Fatalf("directive %+v", d)
	}
}
