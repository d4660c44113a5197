// Package localstack is how the commands find the local stack on this
// machine: the directory it keeps its files in (the demo keys, site.env,
// stack.env) and stack.env, the file `byorelay-local serve` writes to say
// where the running stack is and what its admin token is. `byorelay admin`
// and `byorelay daemon` read it so they reach `make run`'s stack on any
// port without being told, and `byorelay-local demo` reads it to find the
// stack and its token.
//
// It is shared by cmd/byorelay, the operator's build, and
// cmd/byorelay-local, the local stack's, so it holds no test code and
// imports nothing of localtest: the operator's build must not link test
// scaffolding (cmd/byorelay's deps test holds that).
package localstack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/controlplane/admincli"
	"github.com/byorelay/byorelay/internal/repo"
)

// EnvDir overrides the directory.
const EnvDir = "BYORELAY_DEMO_DIR"

// Dir is where the local stack keeps its files: $BYORELAY_DEMO_DIR, or
// .cache/demo at the root of the repository holding the working directory
// (git-ignored: the files hold private keys and the admin token).
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("%w (set %s)", err, EnvDir)
	}
	return filepath.Join(root, ".cache", "demo"), nil
}

// StackFile is the running stack's file, in Dir.
const StackFile = "stack.env"

// EnvRelayURL is the variable in StackFile naming the stack's URL. The
// admin URL and the token are the ones `byorelay admin` reads from the
// environment, so the file can also be sourced into a shell.
const EnvRelayURL = "BYORELAY_URL"

// Stack is what StackFile holds.
type Stack struct {
	URL        string
	AdminToken string
}

// Write writes the running stack's file into dir and returns its path.
// Owner-only: it holds the admin token.
func Write(dir string, s Stack) (string, error) {
	env := "# The running byorelay local stack (byorelay-local serve). Secret: never commit.\n" +
		EnvRelayURL + "=" + s.URL + "\n" +
		admincli.EnvEndpoint + "=" + s.URL + controlplane.AdminPrefix + "\n" +
		controlplane.EnvAdminToken + "=" + s.AdminToken + "\n"
	path := filepath.Join(dir, StackFile)
	return path, os.WriteFile(path, []byte(env), 0o600)
}

// Read reads the file a running stack wrote in dir; found is false when
// there is none (no stack running, or it stopped cleanly).
func Read(dir string) (s Stack, found bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, StackFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Stack{}, false, nil
	}
	if err != nil {
		return Stack{}, false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case EnvRelayURL:
			s.URL = v
		case controlplane.EnvAdminToken:
			s.AdminToken = v
		}
	}
	return s, s.URL != "", nil
}

// Remove deletes the file if it still describes the stack at url: another
// stack started since owns it now.
func Remove(dir, url string) {
	if s, found, _ := Read(dir); found && s.URL == url {
		_ = os.Remove(filepath.Join(dir, StackFile))
	}
}

// Find is the running stack as its file in Dir describes it; found is
// false when there is no Dir (outside the repository, nothing set) or no
// stack running.
func Find() (s Stack, found bool) {
	dir, err := Dir()
	if err != nil {
		return Stack{}, false
	}
	s, found, _ = Read(dir)
	return s, found
}
