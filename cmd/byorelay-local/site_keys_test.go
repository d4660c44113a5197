package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// make site keeps its keys under .cache/site with the local stacks' other
// keys, not at the repository's root; keys an earlier version left at the
// root are still the site's identity (daemons pin it), read there with a
// line saying where they belong.
func TestSiteKeysLiveUnderCache(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/byorelay/byorelay\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	want := filepath.Join(root, ".cache", "site", "site-keys.json")
	old := filepath.Join(root, "site-keys.json")

	var out bytes.Buffer
	if got, err := defaultSiteKeys(&out); err != nil || got != want || out.Len() != 0 {
		t.Fatalf("a first run: %q, %v, said %q; want %q", got, err, out.String(), want)
	}
	if _, err := os.Stat(filepath.Dir(want)); err != nil {
		t.Fatalf("the keys' directory: %v", err)
	}

	if err := os.WriteFile(old, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if got, err := defaultSiteKeys(&out); err != nil || got != old || !strings.Contains(out.String(), "mv "+old+" "+want) {
		t.Fatalf("keys at the old place: %q, %v, said %q; want them read there with how to move them", got, err, out.String())
	}

	if err := os.WriteFile(want, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if got, err := defaultSiteKeys(&out); err != nil || got != want || out.Len() != 0 {
		t.Fatalf("keys in both places: %q, %v, said %q; want %q", got, err, out.String(), want)
	}
}
