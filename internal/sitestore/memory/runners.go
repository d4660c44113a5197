package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/byorelay/byorelay/internal/sitestore"
)

// CreatePairing stores a pending pairing unless a live one holds its code.
func (s *Store) CreatePairing(_ context.Context, p sitestore.Pairing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.liveByUserCode(p.UserCode, s.now()); ok {
		return sitestore.ErrUserCodeTaken
	}
	s.pairings[p.DeviceCodeHash] = sitestore.CopyPairing(p)
	return nil
}

// liveByUserCode finds the unexpired pairing holding a code, with mu held.
func (s *Store) liveByUserCode(code string, now int64) (sitestore.Pairing, bool) {
	for _, p := range s.pairings {
		if p.UserCode == code && p.ExpiresAt > now {
			return p, true
		}
	}
	return sitestore.Pairing{}, false
}

// byUserCode finds the most recent pairing holding a code, live or not, so
// that approving an expired code is answered "expired", not "unknown".
func (s *Store) byUserCode(code string) (sitestore.Pairing, bool) {
	var best sitestore.Pairing
	found := false
	for _, p := range s.pairings {
		if p.UserCode == code && (!found || p.CreatedAt > best.CreatedAt) {
			best, found = p, true
		}
	}
	return best, found
}

// PairingByDeviceCodeHash finds a pairing by its device code's hash.
func (s *Store) PairingByDeviceCodeHash(_ context.Context, hash string) (sitestore.Pairing, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairings[hash]
	return sitestore.CopyPairing(p), ok, nil
}

// PairingByUserCode finds the pairing holding a user code.
func (s *Store) PairingByUserCode(_ context.Context, code string) (sitestore.Pairing, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byUserCode(code)
	return sitestore.CopyPairing(p), ok, nil
}

// ApprovePairing creates the runner and approves the pairing.
func (s *Store) ApprovePairing(_ context.Context, in sitestore.ApproveInput) (sitestore.Runner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byUserCode(in.UserCode)
	if !ok {
		return sitestore.Runner{}, sitestore.ErrPairingUnknown
	}
	p, r, err := sitestore.ApprovePairing(p, in, s.now())
	if err != nil {
		return sitestore.Runner{}, err
	}
	s.runners[r.ID] = sitestore.CopyRunner(r)
	s.pairings[p.DeviceCodeHash] = p
	return sitestore.CopyRunner(r), nil
}

// DenyPairing marks the pairing denied.
func (s *Store) DenyPairing(_ context.Context, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.byUserCode(code); ok {
		p.State = sitestore.PairingDenied
		s.pairings[p.DeviceCodeHash] = p
	}
	return nil
}

// CollectPairing delivers an approved pairing once.
func (s *Store) CollectPairing(_ context.Context, hash string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairings[hash]
	if !ok || p.State != sitestore.PairingApproved || p.Collected {
		return false, nil
	}
	p.Collected = true
	s.pairings[hash] = p
	return true, nil
}

// Runner reads one runner.
func (s *Store) Runner(_ context.Context, id string) (sitestore.Runner, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runners[id]
	return sitestore.CopyRunner(r), ok, nil
}

// TouchRunner records a heartbeat.
func (s *Store) TouchRunner(_ context.Context, in sitestore.TouchInput) (sitestore.Runner, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runners[in.RunnerID]
	if !ok {
		return sitestore.Runner{}, false, nil
	}
	r.Capabilities = slices.Clone(in.Capabilities)
	r.DaemonVersion = in.DaemonVersion
	r.LastHeartbeatAt = s.now()
	s.runners[r.ID] = r
	return sitestore.CopyRunner(r), true, nil
}

// RevokeRunner revokes once.
func (s *Store) RevokeRunner(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.runners[id]; ok && r.RevokedAt == 0 {
		r.RevokedAt = s.now()
		s.runners[id] = r
	}
	return nil
}

// Runners lists runners, by creation.
func (s *Store) Runners(_ context.Context, owner string) ([]sitestore.Runner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sitestore.Runner
	for _, r := range s.runners {
		if owner == "" || r.Owner == owner {
			out = append(out, sitestore.CopyRunner(r))
		}
	}
	slices.SortFunc(out, func(a, b sitestore.Runner) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
