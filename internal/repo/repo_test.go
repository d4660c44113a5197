package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootIsTheDirectoryHoldingThisModule(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "repo", "repo.go")); err != nil {
		t.Fatalf("Root() = %s, which does not hold this package: %v", root, err)
	}
}

func TestRootRefusesADirectoryOutsideTheModule(t *testing.T) {
	t.Chdir(t.TempDir())
	if root, err := Root(); err == nil {
		t.Fatalf("Root() outside the repository = %s, want an error", root)
	}
}
