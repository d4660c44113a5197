package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/localtest"
)

// buildProgram builds pkg (a path from this directory) into dir, as the
// Makefile's bin/ targets do.
func buildProgram(t *testing.T, dir, name, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// running is a started program whose standard output is read line by
// line until it says ready.
type running struct {
	cmd   *exec.Cmd
	lines chan string
	seen  strings.Builder
}

func start(t *testing.T, env []string, bin string, args ...string) *running {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, lines: make(chan string, 256)}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return r
}

// waitFor reads output until a line contains ready.
func (r *running) waitFor(t *testing.T, ready string) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-r.lines:
			if !ok {
				t.Fatalf("%s ended before it said %q:\n%s", r.cmd.Path, ready, r.seen.String())
			}
			r.seen.WriteString(line + "\n")
			if strings.Contains(line, ready) {
				return
			}
		case <-deadline:
			t.Fatalf("%s did not say %q:\n%s", r.cmd.Path, ready, r.seen.String())
		}
	}
}

// interrupt sends SIGINT, as Ctrl-C does, and requires exit status 0
// within the time a clean stop takes.
func (r *running) interrupt(t *testing.T) { r.stopWith(t, syscall.SIGINT) }

// stopWith sends sig and requires exit status 0.
func (r *running) stopWith(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	go func() {
		for line := range r.lines {
			_ = line
		}
	}()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("%s %v after %v: %v (want exit status 0)", filepath.Base(r.cmd.Path), r.cmd.Args[1:], sig, exit)
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %v did not stop within 30 s of %v", filepath.Base(r.cmd.Path), r.cmd.Args[1:], sig)
	}
}

// Every program a make target runs until Ctrl-C (make run, site,
// demo-stream, example) stops on SIGINT and exits 0: run through make, a
// non-zero status is printed as a make error after every Ctrl-C.
func TestLongRunningProgramsExitZeroOnSIGINT(t *testing.T) {
	bins := t.TempDir()
	byorelay := buildProgram(t, bins, "byorelay-local", ".")
	chat := buildProgram(t, bins, "chat", "../../examples/chat")
	ddb := localtest.DynamoEndpoint(t)

	t.Run("make run (serve, DynamoDB)", func(t *testing.T) {
		env := []string{localstack.EnvDir + "=" + t.TempDir()}
		serve := start(t, env, byorelay, "serve", "--port", "0", "--ddb-endpoint", ddb, "--table", localtest.UniqueName("sigint"), "--quiet")
		serve.waitFor(t, "Ctrl-C stops everything")
		serve.interrupt(t)
	})
	t.Run("make run RUN_FLAGS=--store=memory, and make demo-stream against it", func(t *testing.T) {
		env := []string{localstack.EnvDir + "=" + t.TempDir()}
		serve := start(t, env, byorelay, "serve", "--store", "memory", "--port", "0", "--quiet")
		serve.waitFor(t, "Ctrl-C stops everything")
		stream := start(t, env, byorelay, "demo-stream", "--listen", "127.0.0.1:0")
		stream.waitFor(t, "open http://")
		stream.interrupt(t)
		serve.interrupt(t)
	})
	t.Run("make site", func(t *testing.T) {
		site := start(t, nil, byorelay, "site", "--port", "0", "--ddb-endpoint", ddb, "--table", localtest.UniqueName("sigint-site"),
			"--keys", filepath.Join(t.TempDir(), "site-keys.json"))
		site.waitFor(t, "serving")
		site.interrupt(t)
	})
	t.Run("make example", func(t *testing.T) {
		example := start(t, nil, chat, "-addr", "127.0.0.1:0", "-keys", filepath.Join(t.TempDir(), "site-keys.json"))
		example.waitFor(t, "open http://")
		example.interrupt(t)
	})
	// SIGTERM (a process manager's stop, `kill`) is a clean stop too.
	t.Run("example, SIGTERM", func(t *testing.T) {
		example := start(t, nil, chat, "-addr", "127.0.0.1:0", "-keys", filepath.Join(t.TempDir(), "site-keys.json"))
		example.waitFor(t, "open http://")
		example.stopWith(t, syscall.SIGTERM)
	})
	t.Run("site, SIGTERM", func(t *testing.T) {
		site := start(t, nil, byorelay, "site", "--port", "0", "--ddb-endpoint", ddb, "--table", localtest.UniqueName("sigterm-site"),
			"--keys", filepath.Join(t.TempDir(), "site-keys.json"))
		site.waitFor(t, "serving")
		site.stopWith(t, syscall.SIGTERM)
	})
}

// Ctrl-C at a terminal signals make and the program together (one process
// group). Through the Makefile the program exits 0 and make prints no
// error; make itself then ends by the SIGINT it got, as any interrupted
// command does (status 130 in a shell), which is not a failure report.
func TestCtrlCOnALongRunningMakeTargetPrintsNoMakeError(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	ddb := localtest.DynamoEndpoint(t)
	keys := filepath.Join(t.TempDir(), "site-keys.json")
	for _, tc := range []struct {
		name, ready string
		args        []string
	}{
		{"example", "open http://", []string{"example", "EXAMPLE_FLAGS=-addr 127.0.0.1:0 -keys " + keys}},
		{"site", "serving", []string{"site", "SITE_FLAGS=--port 0 --ddb-endpoint " + ddb + " --table " + localtest.UniqueName("make-site") + " --keys " + keys}},
		{"run", "Ctrl-C stops everything", []string{"run", "RUN_FLAGS=--store memory --port 0 --quiet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", "../.."}, tc.args...)...)
			cmd.Env = append(os.Environ(), localstack.EnvDir+"="+t.TempDir())
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			var seen strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				seen.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), tc.ready) {
					break
				}
			}
			if !strings.Contains(seen.String(), tc.ready) {
				t.Fatalf("make %s ended before it was up:\n%s", tc.name, seen.String())
			}
			// As the terminal does: the whole foreground group.
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(out)
			seen.Write(rest)
			err = cmd.Wait()
			if strings.Contains(seen.String(), "make: ***") {
				t.Fatalf("make %s printed an error on Ctrl-C:\n%s", tc.name, seen.String())
			}
			var exit *exec.ExitError
			if err != nil && !(errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
				t.Fatalf("make %s ended with %v on Ctrl-C, want exit 0 or make's own SIGINT:\n%s", tc.name, err, seen.String())
			}
		})
	}
}
