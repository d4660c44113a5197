package peers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/localtest"
)

// Event is one line a script printed: {"event": Name, ...fields}.
type Event struct {
	Name string
	Raw  json.RawMessage
}

// Decode reads the event's fields into v.
func (e Event) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(e.Raw, v); err != nil {
		t.Fatalf("event %s %s: %v", e.Name, e.Raw, err)
	}
}

// Script is a running Node script. Its events arrive in order; closing its
// stdin asks it to stop, and test cleanup does that and then waits.
type Script struct {
	name     string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	changed  chan struct{} // a new event, or stdout closed
	readDone chan struct{}
	done     chan struct{}

	mu     sync.Mutex
	seen   []Event
	next   int // the first event Wait has not looked at
	stderr bytes.Buffer
}

// StepTimeout bounds one step of a peer on loopback (a script starting,
// a pairing, a job). Generous beside what a step takes on an idle machine
// (about a second), because on a loaded one Node alone can take several
// seconds to load the packages, and a slow machine is not a failure.
const StepTimeout = 30 * time.Second

// stopWait is how long a script gets to stop after its stdin closes
// before it is killed: the daemon releases its leases on the way out.
const stopWait = 5 * time.Second

// Dir is this directory, where the scripts live.
func Dir(t testing.TB) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "localtest", "peers")
}

// Start runs `node <script> args...` from this directory with extra
// environment variables, and stops it when the test ends.
func Start(t testing.TB, script string, env []string, args ...string) *Script {
	t.Helper()
	node, _ := localtest.RequireNode(t, "byollm", "@byollm/server", "@byollm/relay", "@byollm/protocol")
	dir := Dir(t)
	cmd := exec.Command(node, append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	s := &Script{name: script, cmd: cmd, changed: make(chan struct{}, 1), readDone: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &s.mu, w: &s.stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	go s.read(stdout)
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// read collects events without ever blocking on the test: a script that
// printed more than anyone read must still reach EOF and exit.
func (s *Script) read(stdout io.Reader) {
	defer func() {
		close(s.readDone)
		s.notify()
	}()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 8*1024*1024)
	for sc.Scan() {
		line := bytes.Clone(sc.Bytes())
		var head struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(line, &head) != nil || head.Event == "" {
			head.Event = "text" // a stray console.log from a package
		}
		ev := Event{Name: head.Event, Raw: line}
		s.mu.Lock()
		s.seen = append(s.seen, ev)
		s.mu.Unlock()
		s.notify()
	}
}

func (s *Script) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Wait returns the next event called name, failing the test if the script
// reports an error, exits, or stays silent past timeout. Events of other
// names before it are skipped (they stay in the log).
func (s *Script) Wait(t testing.TB, name string, timeout time.Duration) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		for s.next < len(s.seen) {
			ev := s.seen[s.next]
			s.next++
			if ev.Name == name {
				s.mu.Unlock()
				return ev
			}
			if ev.Name == "error" {
				s.mu.Unlock()
				t.Fatalf("%s failed waiting for %q: %s\n%s", s.name, name, ev.Raw, s.Log())
			}
		}
		s.mu.Unlock()
		select {
		case <-s.readDone:
			// One more pass: the last lines may have landed with EOF.
			if s.pending() {
				continue
			}
			t.Fatalf("%s exited before %q\n%s", s.name, name, s.Log())
		case <-s.changed:
		case <-deadline:
			t.Fatalf("%s: no %q within %s\n%s", s.name, name, timeout, s.Log())
		}
	}
}

func (s *Script) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next < len(s.seen)
}

// Events are every event printed so far, in order.
func (s *Script) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.seen...)
}

// Log is everything the script printed, for a failure message.
func (s *Script) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s stdout\n", s.name)
	for _, ev := range s.seen {
		b.Write(ev.Raw)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "--- %s stderr\n%s", s.name, s.stderr.String())
	return b.String()
}

// Send writes one line to the script's stdin.
func (s *Script) Send(t testing.TB, line string) {
	t.Helper()
	s.mu.Lock()
	stdin := s.stdin
	s.mu.Unlock()
	if stdin == nil {
		t.Fatalf("%s has stopped", s.name)
	}
	if _, err := io.WriteString(stdin, line+"\n"); err != nil {
		t.Fatalf("%s stdin: %v", s.name, err)
	}
}

// Stop closes the script's stdin, which asks it to finish, and kills it if
// it has not exited within stopWait. Safe to call more than once.
func (s *Script) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	stopped := s.stdin == nil
	stdin := s.stdin
	s.stdin = nil
	s.mu.Unlock()
	if stopped {
		<-s.done
		return
	}
	_ = stdin.Close()
	// Wait only after stdout is drained: cmd.Wait closes the pipe, and the
	// last lines a script prints are the ones a failure needs.
	select {
	case <-s.readDone:
	case <-time.After(stopWait):
		_ = s.cmd.Process.Kill()
		<-s.readDone
		t.Logf("%s did not stop within %s and was killed", s.name, stopWait)
	}
	_ = s.cmd.Wait()
	close(s.done)
	if t.Failed() {
		t.Log(s.Log())
	}
}

// lockedWriter serialises the process's stderr writes with Log's reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
