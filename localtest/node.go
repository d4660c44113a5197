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
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("node is not on PATH: %w", err)
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
