package bench

import (
	"slices"
	"sync"
	"time"
)

// samples collects latencies by name (an endpoint, or "job" for a whole
// lifecycle). Every sample is kept: a run holds at most a few hundred
// thousand, and exact percentiles need no bucketing argument.
type samples struct {
	mu  sync.Mutex
	set map[string][]time.Duration
}

func newSamples() *samples { return &samples{set: map[string][]time.Duration{}} }

func (s *samples) add(name string, d time.Duration) {
	s.mu.Lock()
	s.set[name] = append(s.set[name], d)
	s.mu.Unlock()
}

// Latency is one name's distribution, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
	Mean  float64 `json:"meanMs"`
}

func (s *samples) summary() map[string]Latency {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Latency{}
	for name, ds := range s.set {
		out[name] = summarise(ds)
	}
	return out
}

// summarise uses the nearest-rank percentile: the smallest sample with at
// least p% of samples at or below it, so every figure is a latency that was
// actually observed.
func summarise(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	rank := func(p float64) float64 {
		i := int(float64(len(sorted))*p+0.999999) - 1
		i = max(0, min(i, len(sorted)-1))
		return ms(sorted[i])
	}
	return Latency{
		Count: len(sorted),
		P50:   rank(0.50),
		P95:   rank(0.95),
		P99:   rank(0.99),
		Max:   ms(sorted[len(sorted)-1]),
		Mean:  ms(sum / time.Duration(len(sorted))),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
