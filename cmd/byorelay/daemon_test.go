package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/demo"
)

// lines is a writer a test can wait on.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits for the daemon to print re. A correct daemon prints it
// within a few of its heartbeats; the limit is only for one that never
// does, and is long enough that a loaded machine's slow start does not
// reach it.
func (l *lines) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(l.String()); m != nil {
			return m
		}
	}
	t.Fatalf("never printed %v; printed:\n%s", re, l.String())
	return nil
}

func TestTheDaemonPairsOnceKeepsItsStateAndStopsCleanly(t *testing.T) {
	world, err := demo.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stack, token, err := demo.MemoryStack(t.Context(), world, "http://control.invalid/approve", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(stack)
	t.Cleanup(srv.Close)
	url := srv.URL
	state := filepath.Join(t.TempDir(), "device", "daemon.json")
	args := []string{"--relay", url, "--state", state, "--heartbeat", "200ms"}

	ctx, stop := context.WithCancel(t.Context())
	var stdout, stderr lines
	exit := make(chan int, 1)
	go func() { exit <- runDaemon(ctx, args, &stdout, &stderr) }()
	code := stdout.waitFor(t, regexp.MustCompile(`approve the code (\S+) at`))[1]
	if _, err := controlplane.NewClient(url, nil).WithToken(token).Approve(ctx, controlplane.ApproveRequest{UserCode: code, Owner: "demo-user"}); err != nil {
		t.Fatal(err)
	}
	stdout.waitFor(t, regexp.MustCompile(`paired: runner \S+, owner demo-user, serving 1 site`))
	stdout.waitFor(t, regexp.MustCompile(`working`))
	stop()
	if c := <-exit; c != 0 {
		t.Fatalf("exit %d: %s", c, stderr.String())
	}

	info, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, want 0600", info.Mode().Perm())
	}
	saved, err := daemon.LoadState(state)
	if err != nil || saved.Pairing == nil || saved.Pairing.Owner != "demo-user" {
		t.Fatalf("state = %+v, %v", saved, err)
	}

	// The next run goes straight to work with the saved pairing.
	ctx2, stop2 := context.WithCancel(t.Context())
	var out2, err2 lines
	go func() { exit <- runDaemon(ctx2, args, &out2, &err2) }()
	out2.waitFor(t, regexp.MustCompile(`working`))
	stop2()
	if c := <-exit; c != 0 {
		t.Fatalf("second run: exit %d: %s", c, err2.String())
	}
	if strings.Contains(out2.String(), "approve the code") {
		t.Fatal("a paired device asked to pair again")
	}
}
