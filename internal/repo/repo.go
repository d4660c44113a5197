// Package repo finds the checkout of this repository that holds the
// working directory. The commands that read the repository's files (the
// local stack's directory, the templates, the bootstraps they build) and
// the test scaffolding (npm packages, peer scripts) start from Root.
//
// It imports nothing but the standard library, so the operator's build
// (through cmd/internal/localstack) and localtest can both stand on it
// without either linking the other.
package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// module is the first line of this repository's go.mod. Root matches it,
// not any go.mod: a command run from another module's checkout must not
// take that checkout for this one.
const module = "module github.com/byorelay/byorelay\n"

// Root walks up from the working directory to the directory holding this
// module's go.mod (go test runs each package in its own directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the byorelay repository")
		}
		dir = parent
	}
}
