package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestGrantDeclinesAreCountedInTheLogByReason(t *testing.T) {
	var out bytes.Buffer
	d := newDeclineLog(slog.New(slog.NewTextHandler(&out, nil)))
	d.Declined("unmapped", false)
	d.Declined("not-a-member", true)
	d.Declined("unmapped", false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"reason=unmapped permanent=false count=1",
		"reason=not-a-member permanent=true count=1",
		"reason=unmapped permanent=false count=2",
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %q", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], `msg="grant declines" `+w) {
			t.Errorf("line %d %q, want %q", i, lines[i], w)
		}
	}
}
