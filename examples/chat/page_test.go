package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The page's pairing instructions name commands that exist after the
// README's steps, run from the repository's root: the Go daemon's
// package, and the byollm daemon `make deps` installs (its bin is the
// package's own). A command that is not on the PATH leaves a new user
// stuck at the first step.
func TestThePagesPairingCommandsExist(t *testing.T) {
	page, err := os.ReadFile("page.html")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "go run ./cmd/byorelay daemon --relay ") {
		t.Error("the page does not say how to run the Go daemon")
	}
	if _, err := os.Stat("../../cmd/byorelay/daemon.go"); err != nil {
		t.Errorf("the page's go run ./cmd/byorelay daemon: %v", err)
	}
	bins := regexp.MustCompile(`localtest/js/node_modules/\.bin/(\w+) (connect|run)`).FindAllStringSubmatch(string(page), -1)
	if len(bins) == 0 {
		t.Fatal("the page names no byollm command from localtest/js")
	}
	raw, err := os.ReadFile("../../localtest/js/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Dependencies map[string]string }
	if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if pkg.Dependencies[b[1]] == "" {
			t.Errorf("the page runs %s, which localtest/js/package.json does not install", b[0])
		}
	}
	if regexp.MustCompile(`<code>byollm `).Match(page) {
		t.Error("the page tells the user to run a bare byollm, which the README's steps do not put on the PATH")
	}
}
