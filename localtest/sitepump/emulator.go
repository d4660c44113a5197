// Package sitepump runs the site stack's cloud lane as functions only, the
// way Lambda would, on one machine: the app function behind the local API
// server, and every invocation of the pump function a process of its own
// (Emulator), started by the app's asynchronous invoke, by the pump's own
// hand-over, or by a wake-up the pump armed (the local scheduler), and
// killable with SIGKILL like a Lambda invocation whose sandbox dies.
package sitepump

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/byorelay/byorelay/internal/sitepump"
)

// Invocation is one pump invocation the emulator started.
type Invocation struct {
	Trigger string
	At      time.Time
	Pid     int
	// Attempt is 0 for the first run of an event, n for its n-th retry.
	Attempt int
	// Killed says the emulator killed it; Exited when it ended.
	Killed bool
	Exited time.Time
	cmd    *exec.Cmd
	done   chan struct{}
}

// Emulator starts pump invocations as processes: Command builds one from
// its event (JSON); Serve answers the pump's own asynchronous invokes and
// wake-ups over HTTP (POST /invoke with the event, POST /wake?at=<ms>).
//
// As Lambda does with an asynchronous invocation whose function fails
// (an error, or a sandbox that dies), it runs an invocation that was
// killed or exited non-zero again, up to MaxRetries times, RetryAfter
// times the attempt after it ended (Lambda: 1 and 2 minutes, with
// site-template.yaml's MaximumRetryAttempts 2).
type Emulator struct {
	Command    func(event []byte) *exec.Cmd
	MaxRetries int
	RetryAfter time.Duration
	mu         sync.Mutex
	invs       []*Invocation
	timers     []*time.Timer
	stopped    bool
}

// Invoke starts one invocation with ev, without waiting for it (an
// asynchronous invoke: InvocationType Event).
func (e *Emulator) Invoke(ev sitepump.Event) error { return e.invoke(ev, 0) }

func (e *Emulator) invoke(ev sitepump.Event, attempt int) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	cmd := e.Command(b)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("emulator: start pump: %w", err)
	}
	inv := &Invocation{Trigger: ev.Trigger, At: time.Now(), Pid: cmd.Process.Pid, Attempt: attempt, cmd: cmd, done: make(chan struct{})}
	e.invs = append(e.invs, inv)
	go func() {
		failed := cmd.Wait() != nil
		e.mu.Lock()
		inv.Exited = time.Now()
		if failed && attempt < e.MaxRetries && !e.stopped {
			e.timers = append(e.timers, time.AfterFunc(time.Duration(attempt+1)*e.RetryAfter, func() {
				_ = e.invoke(ev, attempt+1)
			}))
		}
		e.mu.Unlock()
		close(inv.done)
	}()
	return nil
}

// Wake arms a one-time wake-up: at at, an invocation with TriggerWakeup.
func (e *Emulator) Wake(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timers = append(e.timers, time.AfterFunc(time.Until(at), func() {
		_ = e.Invoke(sitepump.Event{Trigger: sitepump.TriggerWakeup})
	}))
}

// ServeHTTP is the pump's way back in: its Starter and Waker post here.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/invoke":
		var ev sitepump.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := e.Invoke(ev); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case "/wake":
		ms, err := strconv.ParseInt(r.URL.Query().Get("at"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.Wake(time.UnixMilli(ms))
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// Running lists the invocations still running.
func (e *Emulator) Running() []*Invocation {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*Invocation
	for _, inv := range e.invs {
		if inv.Exited.IsZero() {
			out = append(out, inv)
		}
	}
	return out
}

// Kill sends SIGKILL to inv's process by its pid and waits for it.
func (e *Emulator) Kill(inv *Invocation) {
	e.mu.Lock()
	inv.Killed = true
	e.mu.Unlock()
	_ = syscall.Kill(inv.Pid, syscall.SIGKILL)
	<-inv.done
}

// Invocations is every invocation so far, copied.
func (e *Emulator) Invocations() []Invocation {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Invocation, len(e.invs))
	for i, inv := range e.invs {
		out[i] = *inv
	}
	return out
}

// Stop starts nothing more and kills what runs.
func (e *Emulator) Stop() {
	e.mu.Lock()
	e.stopped = true
	for _, t := range e.timers {
		t.Stop()
	}
	running := []*Invocation{}
	for _, inv := range e.invs {
		if inv.Exited.IsZero() {
			running = append(running, inv)
		}
	}
	e.mu.Unlock()
	for _, inv := range running {
		e.Kill(inv)
	}
}

// HTTPStarter and HTTPWaker are the pump's triggers inside an emulated
// invocation: they post to the emulator at URL.
type HTTPStarter struct{ URL string }

func (s HTTPStarter) Start(ctx context.Context, ev sitepump.Event) error {
	b, _ := json.Marshal(ev)
	return post(ctx, s.URL+"/invoke", b)
}

type HTTPWaker struct{ URL string }

func (w HTTPWaker) Wake(ctx context.Context, at time.Time) error {
	return post(ctx, w.URL+"/wake?at="+strconv.FormatInt(at.UnixMilli(), 10), nil)
}

// Environ is the process environment with extra set.
func Environ(extra ...string) []string { return append(os.Environ(), extra...) }
