package peers

import (
	"encoding/json"
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
	// Offer is the services' offer scope; "" is private.
	Offer string
	// Services, when set, replace the one service on Model with one named
	// service per entry, each on its own model.
	Services []Service
	// Manual makes the daemon claim only when Tick says so, until Run.
	Manual bool
	// Defaults is the daemon config's defaults (kind to service name): its
	// own choice, never sent to the relay.
	Defaults map[string]string
}

// Service is one named openai-http service of a daemon, on a stand-in
// model.
type Service struct {
	Name  string
	Model *Model
}

// StartDaemon starts a daemon in a fresh home directory. It begins the
// device-code flow at once: UserCode is the code a person would type.
func StartDaemon(t testing.TB, o DaemonOptions) *Daemon {
	t.Helper()
	args := []string{"--origin", o.Origin, "--home", t.TempDir()}
	if o.Model != nil {
		args = append(args, "--modelUrl", o.Model.URL, "--model", o.Model.Name)
	}
	if o.Offer != "" {
		args = append(args, "--offer", o.Offer)
	}
	if len(o.Services) > 0 {
		type service struct {
			Name     string `json:"name"`
			Model    string `json:"model"`
			ModelURL string `json:"modelUrl"`
		}
		var services []service
		for _, s := range o.Services {
			services = append(services, service{Name: s.Name, Model: s.Model.Name, ModelURL: s.Model.URL})
		}
		args = append(args, "--services", mustJSON(t, services))
	}
	if o.Manual {
		args = append(args, "--tickMs", "stdin")
	}
	if o.Defaults != nil {
		args = append(args, "--defaults", mustJSON(t, o.Defaults))
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

// Tick has a Manual daemon tick once (a heartbeat and a claim) and waits
// for the tick to end.
func (d *Daemon) Tick(t testing.TB) {
	t.Helper()
	want := d.ticks() + 1
	d.Send(t, "tick")
	d.waitTicks(t, want)
}

// Run hands a Manual daemon's ticks back to a 100 ms timer.
func (d *Daemon) Run(t testing.TB) { d.Send(t, "run") }

// WaitTicks waits until the daemon has completed n more ticks (each one
// heartbeat and one claim) than it had when called.
func (d *Daemon) WaitTicks(t testing.TB, n int) {
	t.Helper()
	d.waitTicks(t, d.ticks()+n)
}

func (d *Daemon) ticks() int {
	count := 0
	for _, ev := range d.Events() {
		if ev.Name == "tick" {
			count++
		}
	}
	return count
}

func (d *Daemon) waitTicks(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(StepTimeout)
	for d.ticks() < want {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not reach %d ticks within %s\n%s", want, StepTimeout, d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
