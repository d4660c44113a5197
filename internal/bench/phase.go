package bench

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

type counter struct{ n atomic.Int64 }

// tally is what a phase's lifecycles count beside their jobs: claims that
// found nothing, and the rows the site's pending and results answers
// listed.
type tally struct{ empties, pendingRows, resultsRows counter }

func (c *counter) add(n int64) { c.n.Add(n) }
func (c *counter) load() int64 { return c.n.Load() }

// Phase is one measured run of the lifecycle workload on one target.
type Phase struct {
	// Jobs completed (every endpoint answered as expected and both
	// envelopes opened); Failed did not.
	Jobs          int     `json:"jobs"`
	Failed        int     `json:"failed"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobsPerSecond"`
	// EmptyClaims are claims that returned nothing for a job already
	// enqueued (then retried).
	EmptyClaims int64 `json:"emptyClaims"`
	// Latency by endpoint, and "job" for the whole lifecycle.
	Latency map[string]Latency `json:"latency"`
	// Capacity is DynamoDB's consumed capacity by function, and PerJob the
	// total divided by completed jobs. Only for the DynamoDB target.
	Capacity map[string]Capacity `json:"capacity,omitempty"`
	PerJob   *Capacity           `json:"capacityPerJob,omitempty"`
	// Keys is the same capacity by partition key (partkey.Of, share); the
	// report keeps only the hottest (Heat).
	Keys map[string]Capacity `json:"-"`
	// PollKeys is the part of Keys the site's polls spent (pollKey), and
	// PendingRows and ResultsRows the rows those polls' answers listed.
	PollKeys    map[string]Capacity `json:"-"`
	PendingRows int64               `json:"pendingRows"`
	ResultsRows int64               `json:"resultsRows"`
	// CallsPerJob is DynamoDB calls per completed job.
	CallsPerJob float64 `json:"dynamoCallsPerJob,omitempty"`
	// ServerCPUSeconds is the target process's own CPU (user and system)
	// over the phase, and ServerCPUMsPerJob per completed job; only for a
	// target in a process of its own.
	ServerCPUSeconds  float64 `json:"serverCpuSeconds,omitempty"`
	ServerCPUMsPerJob float64 `json:"serverCpuMsPerJob,omitempty"`
	// DriverCPUSeconds is the driver's own process's CPU over the phase
	// (signing, sealing, opening, HTTP, GC), and DriverCPUMsPerJob per
	// completed job: the share of the machine the workload itself takes.
	DriverCPUSeconds  float64 `json:"driverCpuSeconds,omitempty"`
	DriverCPUMsPerJob float64 `json:"driverCpuMsPerJob,omitempty"`
	// Errors holds the first few failures, verbatim.
	Errors []string `json:"errors,omitempty"`
}

// phaseSpec is what runPhase runs.
type phaseSpec struct {
	label    string
	jobs     int
	tag      string // makes job ids unique per phase
	deadline time.Duration
	// limit stops starting new jobs once this much time has passed (0: no
	// limit), so a slow target bounds the run rather than the job count.
	limit    time.Duration
	progress io.Writer
	// samples, when set, collects the latencies across phases (the rounds
	// of one target); Latency then summarises all of them so far.
	samples *samples
}

// runPhase runs spec.jobs lifecycles on t, one worker per daemon (daemon i
// enqueues at site i mod S for its own owner), closed loop: each worker
// starts its next job when the last one is read back, so the rate measured
// is what the relay sustains at that concurrency.
func runPhase(ctx context.Context, t target, w *world, spec phaseSpec) Phase {
	c := newClient(t.origin())
	if spec.samples != nil {
		c.times = spec.samples
	}
	stopAnnouncing := make(chan struct{})
	defer close(stopAnnouncing)
	if w.grants {
		// Outside the measurement: what a running fleet already did.
		// Its own client, so its requests are not in the phase's latency.
		ac := newClient(t.origin())
		if err := announce(ctx, ac, w); err != nil {
			return Phase{Errors: []string{err.Error()}}
		}
		go keepAnnouncing(ctx, ac, w, stopAnnouncing)
	}
	before := t.capacity()
	keysBefore, pollsBefore := t.keyCapacity(), t.pollCapacity()
	cpuBefore, cpuOK := t.cpuSeconds()
	driverBefore, driverOK := ownCPUSeconds()

	var next, done, failed counter
	var tl tally
	var errMu sync.Mutex
	var errs []string

	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Add(1)
	start := time.Now()
	go func() {
		defer ticker.Done()
		progress(spec, stop, start, &done, &failed, func() string {
			errMu.Lock()
			defer errMu.Unlock()
			if len(errs) == 0 {
				return ""
			}
			return errs[0]
		})
	}()

	var wg sync.WaitGroup
	for i, d := range w.daemons {
		s := w.sites[i%len(w.sites)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c.worker()
			defer c.close()
			for {
				if spec.limit > 0 && time.Since(start) > spec.limit {
					return
				}
				n := next.n.Add(1) - 1
				if n >= int64(spec.jobs) || ctx.Err() != nil {
					return
				}
				id := lifecycleJobID(spec.tag, i, n)
				deadline := time.Now().Add(spec.deadline).UnixMilli()
				if err := lifecycle(ctx, c, d, s, id, deadline, &tl); err != nil {
					failed.add(1)
					errMu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					errMu.Unlock()
					continue
				}
				done.add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	ticker.Wait()

	p := Phase{
		Jobs:        int(done.load()),
		Failed:      int(failed.load()),
		Seconds:     elapsed.Seconds(),
		EmptyClaims: tl.empties.load(),
		PendingRows: tl.pendingRows.load(),
		ResultsRows: tl.resultsRows.load(),
		Latency:     c.times.summary(),
		Errors:      errs,
	}
	if elapsed > 0 {
		p.JobsPerSecond = float64(p.Jobs) / elapsed.Seconds()
	}
	if cpuAfter, ok := t.cpuSeconds(); ok && cpuOK && p.Jobs > 0 {
		p.ServerCPUSeconds = cpuAfter - cpuBefore
		p.ServerCPUMsPerJob = p.ServerCPUSeconds * 1000 / float64(p.Jobs)
	}
	if driverAfter, ok := ownCPUSeconds(); ok && driverOK && p.Jobs > 0 {
		p.DriverCPUSeconds = driverAfter - driverBefore
		p.DriverCPUMsPerJob = p.DriverCPUSeconds * 1000 / float64(p.Jobs)
	}
	if after := t.capacity(); after != nil {
		p.Capacity = map[string]Capacity{}
		var total Capacity
		for fn, c := range after {
			if fn == notFunction {
				continue
			}
			used := c.minus(before[fn])
			if used.Calls == 0 {
				continue
			}
			p.Capacity[fn] = used
			total.add(used)
		}
		p.Keys = capacitySince(t.keyCapacity(), keysBefore)
		p.PollKeys = capacitySince(t.pollCapacity(), pollsBefore)
		if p.Jobs > 0 {
			n := float64(p.Jobs)
			p.CallsPerJob = float64(total.Calls) / n
			p.PerJob = &Capacity{ReadUnits: total.ReadUnits / n,
				WriteUnits: total.WriteUnits / n, IndexWrite: total.IndexWrite / n}
		}
	}
	return p
}

// progress prints a line every two seconds while a phase runs.
func progress(spec phaseSpec, stop <-chan struct{}, start time.Time, done, failed *counter, firstError func() string) {
	if spec.progress == nil {
		<-stop
		return
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	shown := false
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d := done.load()
			secs := time.Since(start).Seconds()
			fmt.Fprintf(spec.progress, "  %-28s %6d/%d jobs  %7.1f jobs/s  %d failed  %.0f s\n",
				spec.label, d, spec.jobs, float64(d)/secs, failed.load(), secs)
			if e := firstError(); e != "" && !shown {
				fmt.Fprintf(spec.progress, "    first failure: %s\n", e)
				shown = true
			}
		}
	}
}

// mergeRounds is one target's rounds as one phase: counts, time and
// capacity summed, latency over every round's samples.
func mergeRounds(rounds []Phase, lat *samples) Phase {
	var m Phase
	var total Capacity
	for _, p := range rounds {
		m.Jobs += p.Jobs
		m.Failed += p.Failed
		m.Seconds += p.Seconds
		m.EmptyClaims += p.EmptyClaims
		m.PendingRows += p.PendingRows
		m.ResultsRows += p.ResultsRows
		m.ServerCPUSeconds += p.ServerCPUSeconds
		m.DriverCPUSeconds += p.DriverCPUSeconds
		for _, e := range p.Errors {
			if len(m.Errors) < 5 {
				m.Errors = append(m.Errors, e)
			}
		}
		m.Keys = addCounts(m.Keys, p.Keys)
		m.PollKeys = addCounts(m.PollKeys, p.PollKeys)
		m.Capacity = addCounts(m.Capacity, p.Capacity)
		for _, c := range p.Capacity {
			total.add(c)
		}
	}
	m.Latency = lat.summary()
	if m.Seconds > 0 {
		m.JobsPerSecond = float64(m.Jobs) / m.Seconds
	}
	if m.Jobs > 0 {
		n := float64(m.Jobs)
		m.ServerCPUMsPerJob = m.ServerCPUSeconds * 1000 / n
		m.DriverCPUMsPerJob = m.DriverCPUSeconds * 1000 / n
		if m.Capacity != nil {
			m.CallsPerJob = float64(total.Calls) / n
			m.PerJob = &Capacity{ReadUnits: total.ReadUnits / n, WriteUnits: total.WriteUnits / n, IndexWrite: total.IndexWrite / n}
		}
	}
	return m
}

// capacitySince is what each name used between two meter readings.
func capacitySince(after, before map[string]Capacity) map[string]Capacity {
	out := map[string]Capacity{}
	for k, c := range after {
		if used := c.minus(before[k]); used.Calls > 0 {
			out[k] = used
		}
	}
	return out
}

// lifecycleJobID is the id of daemon i's job n of a phase tagged tag;
// jobIDs matches it and the background jobs' ids (background), so the
// heat report can tell a job's own keys from the keys jobs share.
func lifecycleJobID(tag string, i int, n int64) string {
	return fmt.Sprintf("%s-%03d-%06d", tag, i, n)
}

var jobIDs = regexp.MustCompile(`[a-z0-9]+-[0-9]{3}-[0-9]{6}|deep-[0-9]{7}`)

// addCounts adds from's counts into into, made on the first count, and
// answers it.
func addCounts(into, from map[string]Capacity) map[string]Capacity {
	for k, c := range from {
		if into == nil {
			into = map[string]Capacity{}
		}
		sum := into[k]
		sum.add(c)
		into[k] = sum
	}
	return into
}
