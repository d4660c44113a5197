package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/byorelay/byorelay/store"
)

// PutPairing stores a pending pairing under the ceiling.
func (s *Store) PutPairing(ctx context.Context, p store.PendingPairing) (store.PutResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	// Expired entries go before counting; without this the cap would latch
	// after ten minutes of traffic and nothing would ever pair again.
	s.pairings = slices.DeleteFunc(s.pairings, func(held store.PendingPairing) bool {
		return held.ExpiresAt <= now
	})
	// One outstanding code per keypair: a daemon that restarts pairing
	// replaces its own request, so the code on screen is always the live
	// one. An attacker mints a keypair per code; the ceiling bounds them.
	s.pairings = slices.DeleteFunc(s.pairings, func(held store.PendingPairing) bool {
		return held.Device.Identity == p.Device.Identity
	})
	if len(s.pairings) >= s.pairingCapacity {
		return store.PutAtCapacity, nil
	}
	p.Capabilities = cloneCapabilities(p.Capabilities)
	s.pairings = append(s.pairings, p)
	return store.PutStored, nil
}

// PairingByDeviceCode finds a live pairing by the daemon's secret.
func (s *Store) PairingByDeviceCode(ctx context.Context, deviceCode string) (store.PendingPairing, bool, error) {
	p, ok := s.findPairing(func(p store.PendingPairing) bool { return p.DeviceCode == deviceCode })
	return p, ok, nil
}

// PairingByUserCode finds a live pairing by the code a person typed.
func (s *Store) PairingByUserCode(ctx context.Context, userCode string) (store.PendingPairing, bool, error) {
	wanted := strings.ToUpper(strings.TrimSpace(userCode))
	p, ok := s.findPairing(func(p store.PendingPairing) bool { return p.UserCode == wanted })
	return p, ok, nil
}

// findPairing returns the first entry matching, if it is live. Expiry is
// checked on read rather than swept: a code nobody asks about costs nothing,
// and a sweep would be a second place for the deadline to live.
func (s *Store) findPairing(match func(store.PendingPairing) bool) (store.PendingPairing, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.pairings, match)
	if i < 0 || s.pairings[i].ExpiresAt <= s.now() {
		return store.PendingPairing{}, false
	}
	p := s.pairings[i]
	p.Capabilities = cloneCapabilities(p.Capabilities)
	return p, true
}

// DropPairing deletes a code after a successful pairing: single use.
func (s *Store) DropPairing(ctx context.Context, deviceCode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pairings = slices.DeleteFunc(s.pairings, func(p store.PendingPairing) bool {
		return p.DeviceCode == deviceCode
	})
	return nil
}

// ListPairings lists live pairings, newest first, without their device
// codes.
func (s *Store) ListPairings(ctx context.Context, limit int) ([]store.PendingPairing, error) {
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var live []store.PendingPairing
	for _, p := range s.pairings {
		if p.ExpiresAt > now {
			live = append(live, p)
		}
	}
	slices.SortFunc(live, func(a, b store.PendingPairing) int {
		if c := cmp.Compare(b.ExpiresAt, a.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(b.Device.Identity, a.Device.Identity)
	})
	if len(live) > limit {
		live = live[:limit]
	}
	for i := range live {
		live[i].DeviceCode = ""
		live[i].Capabilities = cloneCapabilities(live[i].Capabilities)
	}
	return live, nil
}
