package main

import (
	"bytes"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/version"
)

// `byorelay version` prints the release, the one a deployment's functions
// log at init and the CHANGELOG's newest heading names.
func TestByorelayVersionPrintsTheRelease(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"version"}, &stdout, &stderr); code != 0 || stdout.String() != "byorelay "+version.Version+"\n" {
		t.Fatalf("byorelay version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
