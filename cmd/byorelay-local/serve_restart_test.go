package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

// The local stack keeps its tables across restarts: a daemon paired on
// one run is recognised on the next, as a daemon paired yesterday must be
// today (otherwise it loops "this runner is not recognised" and nothing
// says to pair again). --fresh deletes what an earlier run kept. Each run
// starts its own DynamoDB Local on the demo dir's tables, as `make run`
// does (two JVM starts: the test takes seconds, a minute on a loaded
// machine).
func TestAPairingSurvivesARestartOfTheStack(t *testing.T) {
	t.Setenv(localtest.EnvDynamoEndpoint, "")
	opts := testServeOptions(t)
	opts.ddbEndpoint = ""
	opts.table = "byorelay-local"
	ctx := t.Context()
	start := func(fresh bool) *localStack {
		t.Helper()
		o := opts
		o.fresh = fresh
		ls, err := startLocal(ctx, o, slog.New(slog.DiscardHandler), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(opts.demoDir, ddbDirName); ls.ddbDir != want {
			t.Fatalf("tables kept in %q, want %q", ls.ddbDir, want)
		}
		return ls
	}
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	device := func(url string, p daemon.Pairing) *daemon.Daemon {
		t.Helper()
		d, err := daemon.New(daemon.Config{RelayURL: url, Keys: keys, Backend: daemon.EchoBackend{}, Pairing: p,
			Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// What an earlier run left: --fresh deletes it.
	kept := filepath.Join(opts.demoDir, ddbDirName, "shared-local-instance.db")
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, []byte("an earlier run's tables"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := start(true)
	if !first.imported {
		t.Error("a --fresh start found a projection")
	}
	d := device(first.url, daemon.Pairing{})
	admin := controlplane.NewClient(first.url, nil).WithToken(first.adminToken)
	pairing, err := d.Pair(ctx, "restart test", func(c daemon.PairCode) {
		if _, err := admin.Approve(ctx, controlplane.ApproveRequest{UserCode: c.UserCode, Owner: "demo-user"}); err != nil {
			t.Errorf("approve: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Tick(ctx); err != nil {
		t.Fatalf("a tick on the run that paired it: %v", err)
	}
	first.close()

	second := start(false)
	defer second.close()
	if second.imported {
		t.Error("the restart imported the demo projection over the one it kept")
	}
	if _, err := device(second.url, pairing).Tick(ctx); err != nil {
		t.Fatalf("the device paired before the restart: %v", err)
	}
	// A device nobody paired is still a stranger: the tick above passed
	// because the pairing was kept, not because anything passes.
	stranger, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	s, err := daemon.New(daemon.Config{RelayURL: second.url, Keys: stranger, Backend: daemon.EchoBackend{},
		Pairing: daemon.Pairing{RunnerID: "runner_stranger", Owner: "demo-user", Sites: pairing.Sites, Known: pairing.Known}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tick(ctx); err == nil || !strings.Contains(err.Error(), "not recognised") {
		t.Fatalf("an unpaired device: %v, want the relay not recognising it", err)
	}
}
