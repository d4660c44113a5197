package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/protocol"
)

func TestStateIsSavedOwnerOnlyAndReadBack(t *testing.T) {
	keys := mustKeys(t)
	path := filepath.Join(t.TempDir(), "dir", "state.json")
	in := daemon.State{RelayURL: "http://relay", Keys: keys.Stored(1), Pairing: &daemon.Pairing{
		RunnerID: "r", Owner: "o", Sites: map[string]protocol.PublicIdentity{keys.KeyID(): keys.Public()}, PairedAt: 2,
	}}
	if err := daemon.SaveState(path, in); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", info.Mode().Perm())
	}
	out, err := daemon.LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := out.Keys.Keys()
	if err != nil || back.KeyID() != keys.KeyID() {
		t.Fatalf("keys read back as %v (%v)", back, err)
	}
	if out.Pairing == nil || out.Pairing.RunnerID != "r" || out.Pairing.Sites[keys.KeyID()] != keys.Public() {
		t.Fatalf("pairing read back as %+v", out.Pairing)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.LoadState(path); err == nil {
		t.Fatal("a key file others can read was accepted")
	}
}
