package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/protocol"
)

// The environment a worker process is started with.
const (
	envRole     = "BYORELAY_CHAOS_ROLE" // "site" or "daemon"
	envName     = "BYORELAY_CHAOS_NAME" // site id or runner id
	envSeed     = "BYORELAY_CHAOS_SEED"
	envReplicas = "BYORELAY_CHAOS_REPLICAS"
	envLog      = "BYORELAY_CHAOS_LOG"
	envOwner    = "BYORELAY_CHAOS_OWNER"     // daemon: its owner
	envOwners   = "BYORELAY_CHAOS_OWNERS"    // site: job owners, round robin
	envSiteJobs = "BYORELAY_CHAOS_SITE_JOBS" // site: how many to publish
	envInflight = "BYORELAY_CHAOS_INFLIGHT"  // site: most jobs not yet ended
	envDeadline = "BYORELAY_CHAOS_DEADLINE"  // site: each job's deadline after publishing
	envSlowSeal = "BYORELAY_CHAOS_SLOW_SEAL" // site: "p/d": hold a payload post up to d, with probability p
)

// slowSeal holds some payload posts for a while before sending them: a
// site too slow to seal within the awaiting window, so the window lapses
// between its pending read and its post (the seal then lands on a newer
// lease, or on nothing), and a job left unsealed three times is evicted.
type slowSeal struct {
	p    float64
	upTo time.Duration
	next http.RoundTripper
}

func (s slowSeal) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/payload") && rand.Float64() < s.p {
		time.Sleep(time.Duration(rand.Int64N(int64(s.upTo))))
	}
	return s.next.RoundTrip(r)
}

// withSlowSeal wraps client's transport as envSlowSeal says; unchanged
// when it is unset.
func withSlowSeal(client *http.Client) (*http.Client, error) {
	v := os.Getenv(envSlowSeal)
	if v == "" {
		return client, nil
	}
	ps, ds, ok := strings.Cut(v, "/")
	p, err := strconv.ParseFloat(ps, 64)
	d, derr := time.ParseDuration(ds)
	if !ok || err != nil || derr != nil || p < 0 || p > 1 || d <= 0 {
		return nil, fmt.Errorf("%s=%q: want probability/duration, e.g. 0.2/3s", envSlowSeal, v)
	}
	slow := *client
	slow.Transport = slowSeal{p: p, upTo: d, next: client.Transport}
	return &slow, nil
}

// eventLog appends one line per event to the worker's log file, written
// at once (O_APPEND, one write a line), so a SIGKILL loses at most the
// line being written and never reorders two.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
}

func openLog(path string) (*eventLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &eventLog{f: f}, nil
}

func (l *eventLog) line(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.WriteString(fmt.Sprintf(format, args...) + "\n")
}

// runWorker is a re-executed test binary's whole life.
func runWorker(role string) error {
	log, err := openLog(os.Getenv(envLog))
	if err != nil {
		return err
	}
	client, err := balancedClient(strings.Split(os.Getenv(envReplicas), ","))
	if err != nil {
		return err
	}
	name := os.Getenv(envName)
	keys, err := keysFor(os.Getenv(envSeed), name)
	if err != nil {
		return err
	}
	relayURL := strings.Split(os.Getenv(envReplicas), ",")[0]
	switch role {
	case "daemon":
		return runDaemon(relayURL, name, keys, client, log)
	case "site":
		return runSite(relayURL, name, keys, client, log)
	}
	return fmt.Errorf("unknown role %q", role)
}

// runDaemon serves until killed, logging every result the relay accepted
// from it (not a replay's "already recorded").
func runDaemon(relayURL, runnerID string, keys *protocol.Keys, client *http.Client, log *eventLog) error {
	d, err := daemon.New(daemon.Config{
		RelayURL: relayURL, Keys: keys, Backend: daemon.EchoBackend{},
		Pairing:           daemon.Pairing{RunnerID: runnerID, Owner: os.Getenv(envOwner)},
		HeartbeatInterval: time.Second, Concurrency: 4, HTTPClient: client,
		OnEvent: func(e daemon.Event) {
			if e.Type == daemon.EventReported && !strings.Contains(e.Detail, "already recorded") {
				log.line("acc %s %s %d", e.Site, e.JobID, time.Now().UnixMilli())
			}
		},
	})
	if err != nil {
		return err
	}
	return d.Run(context.Background())
}

// runSite publishes its share of jobs, never more than the in-flight bound
// unended at once, pumps until every one has ended, and logs each job as
// published and then its fate ("wrong" for a verified result that is not
// the echo of what it asked).
func runSite(relayURL, siteID string, keys *protocol.Keys, client *http.Client, log *eventLog) error {
	jobs, err := strconv.Atoi(os.Getenv(envSiteJobs))
	if err != nil {
		return err
	}
	inflight, err := strconv.Atoi(os.Getenv(envInflight))
	if err != nil {
		return err
	}
	deadline, err := time.ParseDuration(os.Getenv(envDeadline))
	if err != nil {
		return err
	}
	owners := strings.Split(os.Getenv(envOwners), ",")
	if client, err = withSlowSeal(client); err != nil {
		return err
	}
	s, err := site.New(site.Config{RelayURL: relayURL, SiteID: siteID, Keys: keys, HTTPClient: client, MaxAttempts: 4})
	if err != nil {
		return err
	}

	var mu sync.Mutex
	want := map[string]string{}
	ended := 0
	allEnded := make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	go func() {
		runErr <- s.Run(ctx, 100*time.Millisecond, func(rep site.Report) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range rep.Ended {
				fate := string(e.Fate)
				if e.Fate == site.FateVerified && e.Result.Outcome.TextOrEmpty() != want[e.JobID] {
					fate = "wrong"
				}
				log.line("end %s %s %d", e.JobID, fate, time.Now().UnixMilli())
				ended++
			}
			if ended == jobs {
				close(allEnded)
			}
		})
	}()

	for i := range jobs {
		for s.Pending() >= inflight {
			select {
			case err := <-runErr:
				return fmt.Errorf("pumping stopped: %w", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		id := fmt.Sprintf("%s-%d", siteID, i)
		payload := protocol.GeneratePayload(fmt.Sprintf("job %s asks %d", id, rand.Int64()))
		stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owners[i%len(owners)], Audience: "private",
			DeadlineAt: time.Now().Add(deadline).UnixMilli()}
		mu.Lock()
		want[id] = "echo: " + daemon.ComposePrompt(protocol.KindGenerate, payload)
		mu.Unlock()
		log.line("pub %s %d", id, stub.DeadlineAt)
		for {
			_, err := s.Publish(ctx, stub, payload)
			if err == nil {
				break
			}
			var refused *site.EnqueueRefused
			if errors.As(err, &refused) || !site.IsRetryable(err) {
				return fmt.Errorf("publish %s: %w", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	select {
	case <-allEnded:
		log.line("done")
		return nil
	case err := <-runErr:
		return fmt.Errorf("pumping stopped: %w", err)
	}
}
