package peers

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Site is a running @byollm/server 0.1.1 site on its relay lane (site.mjs)
// with its jobs enqueued, pumping until every one has ended.
type Site struct {
	*Script
}

// SiteOptions configure the site and its one job.
type SiteOptions struct {
	// Relay is the relay's origin.
	Relay string
	// SiteID is the site's id at the relay; Keys its identity, which the
	// relay must already have registered under SiteID.
	SiteID string
	Keys   *protocol.Keys
	// Owner is the person the jobs are for; Prompt their llm.generate
	// prompt.
	Owner  string
	Prompt string
	// Count is how many jobs it enqueues; 0 is one. With more than one,
	// job i's prompt is Prompt + " #i" (i from 1).
	Count int
	// Purpose is the jobs' purpose; "" names none.
	Purpose string
}

// StartSite starts the site. Its keys reach it the way a deployment
// supplies them, as BYOLLM_SITE_KEYS (base64 of the StoredKeys JSON).
func StartSite(t testing.TB, o SiteOptions) *Site {
	t.Helper()
	stored, err := json.Marshal(o.Keys.Stored(time.Now().UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"BYOLLM_SITE_KEYS=" + base64.StdEncoding.EncodeToString(stored)}
	args := []string{"--relay", o.Relay, "--siteId", o.SiteID, "--owner", o.Owner, "--prompt", o.Prompt,
		"--count", strconv.Itoa(max(o.Count, 1)), "--timeoutMs", "55000"}
	if o.Purpose != "" {
		args = append(args, "--purpose", o.Purpose)
	}
	return &Site{Start(t, "site.mjs", env, args...)}
}

// Refused is a job the relay would not take at enqueue, as the site's own
// client reported it: the error class it threw and the protocol's code.
type Refused struct {
	Prompt    string `json:"prompt"`
	Error     string `json:"error"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"`
}

// Refused waits for the next job the relay refused at enqueue.
func (s *Site) Refused(t testing.TB) Refused {
	t.Helper()
	var r Refused
	s.Wait(t, "refused", StepTimeout).Decode(t, &r)
	return r
}

// Enqueued is the site's record of a job it published.
type Enqueued struct {
	JobID     string `json:"jobId"`
	Prompt    string `json:"prompt"`
	Audience  string `json:"audience"`
	SizeClass string `json:"sizeClass"`
}

// Enqueued waits for the next job to be published at the relay.
func (s *Site) Enqueued(t testing.TB) Enqueued {
	t.Helper()
	var e Enqueued
	s.Wait(t, "enqueued", StepTimeout).Decode(t, &e)
	return e
}

// Delivered is the site's DeliveredResult for the job: what its app reads.
type Delivered struct {
	JobID   string `json:"jobId"`
	State   string `json:"state"`
	Outcome *struct {
		Outcome string `json:"outcome"`
		Text    string `json:"text"`
	} `json:"outcome"`
	Provenance *struct {
		Audience     string `json:"audience"`
		RunnerID     string `json:"runnerId"`
		RunnerOwner  string `json:"runnerOwner"`
		BackendClass string `json:"backendClass"`
		Model        string `json:"model"`
		Untrusted    bool   `json:"untrusted"`
	} `json:"provenance"`
}

// Result waits for the next job to end at the site: its result opened,
// verified against the claiming device's key, and completed in the site's
// own store.
func (s *Site) Result(t testing.TB) Delivered {
	t.Helper()
	var d Delivered
	s.Wait(t, "result", 60*time.Second).Decode(t, &d)
	return d
}

// Sealed waits until the site has sealed jobID's payload to a device.
func (s *Site) Sealed(t testing.TB, jobID string) {
	t.Helper()
	for {
		var report struct {
			Sealed []string `json:"sealed"`
		}
		s.Wait(t, "pump", StepTimeout).Decode(t, &report)
		for _, id := range report.Sealed {
			if id == jobID {
				return
			}
		}
	}
}
