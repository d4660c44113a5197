package chaos

import (
	"crypto/sha256"

	"github.com/byorelay/byorelay/protocol"
)

// keysFor derives a participant's keys from the run's secret seed and its
// name, so the coordinator (which writes the projection) and the worker
// process (which signs) hold the same keys without a key file. The seed is
// random per run and lives only in the processes' environment.
func keysFor(seed, name string) (*protocol.Keys, error) {
	id := sha256.Sum256([]byte("identity\x00" + seed + "\x00" + name))
	enc := sha256.Sum256([]byte("encryption\x00" + seed + "\x00" + name))
	return protocol.NewKeys(id[:], enc[:])
}
