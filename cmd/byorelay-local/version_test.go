package main

import (
	"bytes"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/version"
)

// `byorelay-local version` prints the release byorelay prints.
func TestLocalVersionPrintsTheRelease(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"version"}, &stdout, &stderr); code != 0 || stdout.String() != "byorelay-local "+version.Version+"\n" {
		t.Fatalf("byorelay-local version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
