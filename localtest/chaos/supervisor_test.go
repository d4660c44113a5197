package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// supervisor runs the processes, restarts the ones that are meant to come
// back, and stops them all at the end.
type supervisor struct {
	t   *testing.T
	dir string

	mu       sync.Mutex
	procs    []*proc
	stopping bool
	wg       sync.WaitGroup
}

// proc is one supervised process. Its output goes to <dir>/<name>.out,
// appended across restarts.
type proc struct {
	sup     *supervisor
	name    string
	path    string
	args    []string
	env     []string
	restart bool

	mu     sync.Mutex
	pid    int // 0 while down
	starts int
	exited chan error // the last incarnation's exit, for processes not restarted
}

func (s *supervisor) add(name, path string, args, env []string, restart bool) *proc {
	p := &proc{sup: s, name: name, path: path, args: args, env: env, restart: restart, exited: make(chan error, 1)}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.wg.Add(1)
	go p.keep()
	return p
}

func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// keep runs the process and, if it is one that comes back, starts it again
// a moment after every exit until the run stops: 0.2 to 1.5 s down, the
// time a crashed instance or a rebooting machine is gone.
func (p *proc) keep() {
	defer p.sup.wg.Done()
	for !p.sup.isStopping() {
		err := p.runOnce()
		if !p.restart {
			p.exited <- err
			return
		}
		time.Sleep(time.Duration(200+rand.IntN(1300)) * time.Millisecond)
	}
}

func (p *proc) runOnce() error {
	out, err := os.OpenFile(filepath.Join(p.sup.dir, p.name+".out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	p.mu.Lock()
	if p.sup.isStopping() {
		p.mu.Unlock()
		return errors.New("stopping")
	}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.pid = cmd.Process.Pid
	p.starts++
	p.mu.Unlock()
	err = cmd.Wait()
	p.mu.Lock()
	p.pid = 0
	p.mu.Unlock()
	return err
}

// kill sends SIGKILL to the process by its pid, if it is up.
func (p *proc) kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 {
		return false
	}
	return syscall.Kill(p.pid, syscall.SIGKILL) == nil
}

func (p *proc) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0
}

func (p *proc) isReplica(replicas []*proc) bool { return slices.Contains(replicas, p) }

func liveCount(ps []*proc) int {
	n := 0
	for _, p := range ps {
		if p.up() {
			n++
		}
	}
	return n
}

// waitExit waits for a process that is not restarted to end by itself.
func (p *proc) waitExit(limit time.Duration) error {
	select {
	case err := <-p.exited:
		if err != nil {
			return fmt.Errorf("exited: %w (see %s.out)", err, p.name)
		}
		return nil
	case <-time.After(limit):
		return fmt.Errorf("still running after %v", limit)
	}
}

// stopAll kills every process and waits for the supervisors. Idempotent.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	s.stopping = true
	procs := slices.Clone(s.procs)
	s.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	s.wg.Wait()
}
