package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestRefusesBinariesAndLargeFiles builds a repository holding one of each
// thing the check must refuse, and one of each it must let through.
func TestRefusesBinariesAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.invalid", "-c", "user.name=t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name string, data []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	// This test's own binary: a real Go executable, the thing that must
	// never be tracked.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	write("chat", bin, 0o755)
	write("tool.exe", []byte("MZ\x90\x00rest"), 0o644)
	write("run", []byte("#!/usr/bin/env bash\necho hi\n"), 0o755)
	write("data.bin", []byte("not a script"), 0o755)
	write("big.json", make([]byte, maxBytes+1), 0o644)
	write("fits.json", make([]byte, maxBytes), 0o644)
	write("main.go", []byte("package main\n"), 0o644)
	git("add", ".")

	problems, err := check(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"big.json: 1048577 bytes, over the 1048576-byte limit for a tracked file",
		"chat: a built executable",
		"data.bin: executable mode, but not a #! script",
		"tool.exe: a built executable",
	}
	if !slices.Equal(problems, want) {
		t.Fatalf("problems:\n%q\nwant:\n%q", problems, want)
	}
}

// TestThisRepositoryHoldsNoBinary is the check itself, on this repository.
func TestThisRepositoryHoldsNoBinary(t *testing.T) {
	problems, err := check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
