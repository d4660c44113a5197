package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/localtest/demo"
)

// demoStack is the local stack's shape in one process (demo.MemoryStack)
// with the demo projection imported from the demo keys in dir, named in
// dir's stack.env as serve names itself.
func demoStack(t *testing.T, dir string, author *grants.Author) string {
	t.Helper()
	world, err := demo.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	stack, token, err := demo.MemoryStack(t.Context(), world, "http://control.invalid/approve", author)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(stack)
	t.Cleanup(srv.Close)
	// As serve does: the demo finds the stack and its token here.
	if _, err := localstack.Write(dir, localstack.Stack{URL: srv.URL, AdminToken: token}); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

func TestTheDemoPairsADeviceAndFinishesEveryJob(t *testing.T) {
	t.Run("direct mode", func(t *testing.T) { runTheDemo(t, nil) })
	// With grants on, every job needs a grant for a service its owner
	// mapped: the demo world maps the demo owner's to the demo device's.
	t.Run("with grants", func(t *testing.T) {
		seed, err := grants.NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		author, err := grants.New(seed, grants.Options{})
		if err != nil {
			t.Fatal(err)
		}
		runTheDemo(t, author)
	})
}

func runTheDemo(t *testing.T, author *grants.Author) {
	dir := t.TempDir()
	url := demoStack(t, dir, author)
	var stdout, stderr bytes.Buffer
	// No --relay: the demo finds the stack through the env file serve writes.
	code := runDemo(t.Context(), []string{"--demo-dir", dir, "--jobs", "2", "--timeout", "20s"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Log(out)
	for _, want := range []string{
		"through the relay at " + url,
		"The relay answers with a user code",
		"Approved: the device is runner",
		"It pinned the site's key",
		"device: claimed demo-",
		"site:   sealed demo-",
		"device: opened demo-",
		"site:   opened the result of demo-",
		`-> "echo: Say hello to the relay."`,
		"Done: 2 job(s)",
		"is revoked, so the console lists only devices people pair",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo never said %q\n%s", want, out)
		}
	}
}

func TestTheDemoSaysToStartTheStackFirst(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runDemo(t.Context(), []string{"--relay", "http://127.0.0.1:1", "--demo-dir", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "make run") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// With no stack up, the demo says what to run, not the dial error.
func TestTheDemoSaysHowToFindAStackThatIsNotThere(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Load(dir); err != nil { // keys as a stack left them
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := runDemo(t.Context(), []string{"--relay", "http://127.0.0.1:1", "--demo-dir", dir, "--timeout", "10s"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "make run") || !strings.Contains(stderr.String(), "DEMO_FLAGS='--relay") || strings.Contains(stderr.String(), "connection refused") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// With no stack up, the stream demo says so and what to run, rather than
// a dial error.
func TestTheStreamDemoSaysToStartTheStackFirst(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runDemoStream(t.Context(), []string{"--relay", "http://127.0.0.1:1", "--demo-dir", t.TempDir()}, &stdout, &stderr)
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, "nothing answers at http://127.0.0.1:1") || !strings.Contains(msg, "'make run'") ||
		!strings.Contains(msg, "make demo-stream DEMO_FLAGS='--relay") || strings.Contains(msg, "<nil>") {
		t.Fatalf("exit %d, stderr:\n%s", code, msg)
	}
}
