package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/controlplane"
)

func TestByorelayAdminTalksToTheAdminAPI(t *testing.T) {
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
	if !strings.Contains(stdout.String(), `"members": [`) || !strings.Contains(stdout.String(), `"bob"`) {
		t.Fatalf("export printed %s", stdout.String())
	}
	if code := run(t.Context(), []string{"admin"}, &stdout, &stderr); code != 2 {
		t.Fatalf("bare admin: exit %d, want 2 (usage)", code)
	}
}
