package peers

import (
	"testing"
	"time"
)

// DaemonService is the id of the one service daemon.mjs configures, which
// it advertises for llm.generate and llm.chat: what a mapping names.
const DaemonService = "primary"

// Daemon is a running byollm 0.1.1 daemon (daemon.mjs).
type Daemon struct {
	*Script
}

// DaemonOptions configure one daemon.
type DaemonOptions struct {
	// Origin is the relay the daemon pairs with and serves.
	Origin string
	// Model is the stand-in model its openai-http backend points at.
	Model *Model
	// Offer is the service's offer scope; "" is private.
	Offer string
}

// StartDaemon starts a daemon in a fresh home directory. It begins the
// device-code flow at once: UserCode is the code a person would type.
func StartDaemon(t testing.TB, o DaemonOptions) *Daemon {
	t.Helper()
	args := []string{"--origin", o.Origin, "--home", t.TempDir(), "--modelUrl", o.Model.URL, "--model", o.Model.Name}
	if o.Offer != "" {
		args = append(args, "--offer", o.Offer)
	}
	return &Daemon{Start(t, "daemon.mjs", nil, args...)}
}

// UserCode waits for the pairing code the daemon shows.
func (d *Daemon) UserCode(t testing.TB) string {
	t.Helper()
	var code struct {
		UserCode        string `json:"userCode"`
		VerificationURL string `json:"verificationUrl"`
	}
	d.Wait(t, "code", StepTimeout).Decode(t, &code)
	if code.UserCode == "" {
		t.Fatalf("daemon showed an empty user code\n%s", d.Log())
	}
	return code.UserCode
}

// Pairing is what the daemon reported once paired.
type Pairing struct {
	RunnerID string `json:"runnerId"`
	Owner    string `json:"owner"`
	// Sites are the key ids it pinned.
	Sites []string `json:"sites"`
	// ControlPlanePublic says whether the relay handed it a grant-signing
	// key, which puts it in relayed mode (every job needs a grant).
	ControlPlanePublic bool `json:"controlPlanePublic"`
}

// Paired waits for the approved pairing.
func (d *Daemon) Paired(t testing.TB) Pairing {
	t.Helper()
	var p Pairing
	d.Wait(t, "paired", StepTimeout).Decode(t, &p)
	return p
}

// RunnerEvent is one of the daemon's RunnerEvents (claimed, refused,
// finished, grant-refused, …); only the fields the tests read.
type RunnerEvent struct {
	Type    string `json:"type"`
	JobID   string `json:"jobId"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// RunnerEvents are the runner events so far, in order.
func (d *Daemon) RunnerEvents(t testing.TB) []RunnerEvent {
	t.Helper()
	var out []RunnerEvent
	for _, ev := range d.Events() {
		if ev.Name != "runner" {
			continue
		}
		var re RunnerEvent
		ev.Decode(t, &re)
		out = append(out, re)
	}
	return out
}

// Finished waits for the daemon's report that it finished jobID, and
// returns the outcome it reported ("ok", "error", "canceled").
func (d *Daemon) Finished(t testing.TB, jobID string) string {
	t.Helper()
	deadline := time.Now().Add(StepTimeout)
	for {
		for _, ev := range d.RunnerEvents(t) {
			if ev.Type == "finished" && ev.JobID == jobID {
				return ev.Outcome
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not finish %s within %s\n%s", jobID, StepTimeout, d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitTicks waits until the daemon has completed n more ticks (each one
// heartbeat and one claim) than it had when called.
func (d *Daemon) WaitTicks(t testing.TB, n int) {
	t.Helper()
	ticks := func() int {
		count := 0
		for _, ev := range d.Events() {
			if ev.Name == "tick" {
				count++
			}
		}
		return count
	}
	want := ticks() + n
	deadline := time.Now().Add(StepTimeout)
	for ticks() < want {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not tick %d times within %s\n%s", n, StepTimeout, d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
