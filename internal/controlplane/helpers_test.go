package controlplane_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/memory"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var epoch = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func newKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rig is an Admin over a memory projection and a memory pairing store,
// with a clock the test moves.
type rig struct {
	store    *controlplane.Store
	admin    *controlplane.Admin
	pairings *memory.Store
	clock    *clock.Manual
}

func newRig(t *testing.T) *rig {
	t.Helper()
	clk := clock.NewManual(epoch)
	pairings := memory.New(store.Options{Clock: clk})
	s := controlplane.NewStore(controlplane.NewMemoryStorage())
	return &rig{
		store:    s,
		pairings: pairings,
		clock:    clk,
		admin: controlplane.NewAdmin(controlplane.AdminConfig{
			Store: s, Pairings: pairings, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}),
	}
}

// pending puts a pending pairing for keys, as the relay's pair start does,
// and returns its user code.
func (r *rig) pending(t *testing.T, keys *protocol.Keys, label string) string {
	t.Helper()
	code := protocol.NewUserCode()
	res, err := r.pairings.PutPairing(t.Context(), store.PendingPairing{
		DeviceCode: protocol.NewDeviceCode(), UserCode: code, Device: keys.Public(),
		Label: label, Platform: "linux", DaemonVersion: "0.1.1", Capabilities: []protocol.Capability{},
		ExpiresAt: clock.EpochMs(r.clock.Now()) + store.PairingCodeTTLMs,
	})
	if err != nil || res != store.PutStored {
		t.Fatalf("put pairing: %v %v", res, err)
	}
	return code
}

// refusal asserts err is a refusal with this status.
func refusal(t *testing.T, err error, status int) {
	t.Helper()
	var e *controlplane.Error
	if !errors.As(err, &e) || e.Status != status {
		t.Fatalf("got %v, want a refusal with status %d", err, status)
	}
}
