// Package emf builds CloudWatch embedded metric format records: one JSON
// line on a function's stdout, which Lambda's log agent turns into
// metrics with no API call and no added latency.
package emf

import (
	"encoding/json"
	"time"
)

// Metric is one value of a record. Unit is CloudWatch's ("Count",
// "Milliseconds", ...); "" is Count.
type Metric struct {
	Name  string
	Unit  string
	Value float64
}

type directive struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []metricSpec `json:"Metrics"`
}

type metricSpec struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type meta struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// Line is one record, newline-terminated: ms under namespace, published
// once per dimension set in dims (each set names properties in props,
// which carries their values and any plain property to search in Logs
// Insights), stamped at.
func Line(namespace string, dims [][]string, props map[string]any, at time.Time, ms ...Metric) []byte {
	rec := make(map[string]any, len(props)+len(ms)+1)
	for k, v := range props {
		rec[k] = v
	}
	dir := directive{Namespace: namespace, Dimensions: dims}
	for _, m := range ms {
		unit := m.Unit
		if unit == "" {
			unit = "Count"
		}
		dir.Metrics = append(dir.Metrics, metricSpec{Name: m.Name, Unit: unit})
		rec[m.Name] = m.Value
	}
	rec["_aws"] = meta{Timestamp: at.UnixMilli(), CloudWatchMetrics: []directive{dir}}
	line, err := json.Marshal(rec)
	if err != nil {
		// Unreachable for the strings and numbers callers pass; a
		// metric that cannot be built is lost, not an error.
		return nil
	}
	return append(line, '\n')
}
