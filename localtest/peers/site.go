package peers

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/byorelay/byorelay/protocol"
)

// Site is a running @byollm/server 0.1.1 site on its relay lane (site.mjs)
// with one job enqueued, pumping until that job ends.
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
	// Owner is the person the job is for; Prompt its llm.generate prompt.
	Owner  string
	Prompt string
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
	return &Site{Start(t, "site.mjs", env,
		"--relay", o.Relay, "--siteId", o.SiteID, "--owner", o.Owner, "--prompt", o.Prompt,
		"--timeoutMs", "55000")}
}

// Enqueued is the site's record of the job it published.
type Enqueued struct {
	JobID     string `json:"jobId"`
	Audience  string `json:"audience"`
	SizeClass string `json:"sizeClass"`
}

// Enqueued waits for the job to be published at the relay.
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

// Result waits for the job to end at the site: its result opened,
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
