package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/byorelay/byorelay/protocol"
)

// State is what a runnable daemon keeps between runs: its keys, the relay
// it paired with and the pairing (pins included). It holds private keys, so
// it lives in a file only its owner can read, in a directory the owner
// picks, and is never committed.
type State struct {
	RelayURL string              `json:"relayUrl"`
	Keys     protocol.StoredKeys `json:"keys"`
	Pairing  *Pairing            `json:"pairing,omitempty"`
}

// SaveState writes s to path with mode 0600, through a temporary file and a
// rename so a crash mid-write never leaves half a key file.
func SaveState(path string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// LoadState reads a state file. A missing file is os.ErrNotExist. A file
// others can read is refused: the keys in it are this device's identity.
func LoadState(path string) (State, error) {
	info, err := os.Stat(path)
	if err != nil {
		return State{}, err
	}
	if info.Mode().Perm()&0o077 != 0 {
		return State{}, fmt.Errorf("daemon state %s is readable by others (mode %v); chmod 600 it", path, info.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("daemon state %s: %w", path, err)
	}
	if s.RelayURL == "" {
		return State{}, errors.New("daemon state " + path + ": no relayUrl")
	}
	return s, nil
}
