package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
)

func TestByorelayAdminTalksToTheAdminAPI(t *testing.T) {
	t.Setenv(localstack.EnvDir, t.TempDir())
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(controlplane.AdminHandler(admin))
	defer srv.Close()

	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"admin", "--endpoint", srv.URL, "roster", "set", "team", "--owner", "alice", "--members", "bob"}, &stdout, &stderr); code != 0 {
		t.Fatalf("roster set: exit %d: %s", code, stderr.String())
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"admin", "--endpoint", srv.URL, "export"}, &stdout, &stderr); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"members":[`) || !strings.Contains(stdout.String(), `"bob"`) {
		t.Fatalf("export printed %s", stdout.String())
	}
	if code := run(t.Context(), []string{"admin"}, &stdout, &stderr); code != 2 {
		t.Fatalf("bare admin: exit %d, want 2 (usage)", code)
	}
}

// With nothing in the environment, `byorelay admin` finds the running
// local stack and its per-run token through the env file serve writes.
func TestAdminFindsTheRunningStackThroughItsEnvFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(localstack.EnvDir, dir)
	t.Setenv(admincli.EnvEndpoint, "")
	t.Setenv(controlplane.EnvAdminToken, "")
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	admin := controlplane.NewAdmin(controlplane.AdminConfig{Store: s, Logger: slog.New(slog.DiscardHandler)})
	token, err := controlplane.NewAdminToken()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(controlplane.LocalGuard(controlplane.GuardConfig{Token: token}, controlplane.AdminHandler(admin)))
	defer srv.Close()

	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"admin", "export"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), admincli.EnvEndpoint) {
		t.Fatalf("with no stack running: exit %d: %s", code, stderr.String())
	}
	if _, err := localstack.Write(dir, localstack.Stack{URL: srv.URL, AdminToken: token}); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"admin", "export"}, &stdout, &stderr); code != 0 {
		t.Fatalf("export through stack.env: exit %d: %s", code, stderr.String())
	}
}

// The local stack's commands are not in the operator's build; asked for
// one, it says where it is.
func TestByorelaySendsTheLocalCommandsToByorelayLocal(t *testing.T) {
	for _, c := range []string{"serve", "site", "invoke", "demo", "demo-stream", "fake-llm", "bench"} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{c}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "./cmd/byorelay-local "+c) {
			t.Errorf("byorelay %s: exit %d: %s", c, code, stderr.String())
		}
	}
}
