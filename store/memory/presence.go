package memory

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/store"
)

// Seen records a device as present, stamped by the store clock.
func (s *Store) Seen(ctx context.Context, in store.Sighting) (store.Presence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if existing, ok := s.presence[in.RunnerID]; ok {
		existing.LastSeenAt = now
		// Replaced, not merged: the heartbeat re-sends the whole matrix so a
		// server never matches against a stale one, and a union would keep
		// advertising a backend the machine lost, so work would route to it.
		existing.Capabilities = cloneCapabilities(in.Capabilities)
		// Replaced in the same breath: a kind that stopped being contended
		// must stop being reported, or the page keeps asking for a decision
		// already made.
		existing.Withheld = cloneWithheld(in.Withheld)
		return copyPresence(existing), nil
	}
	fresh := &store.Presence{
		RunnerID:     in.RunnerID,
		Owner:        in.Owner,
		Device:       in.Device,
		LastSeenAt:   now,
		Capabilities: cloneCapabilities(in.Capabilities),
		Withheld:     cloneWithheld(in.Withheld),
	}
	s.presence[in.RunnerID] = fresh
	s.presenceOrder = append(s.presenceOrder, in.RunnerID)
	return copyPresence(fresh), nil
}

// Presence finds a runner's record.
func (s *Store) Presence(ctx context.Context, runnerID string) (store.Presence, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.presence[runnerID]
	if !ok {
		return store.Presence{}, false, nil
	}
	return copyPresence(p), true, nil
}

// Everyone lists every presence record, first seen first.
func (s *Store) Everyone(ctx context.Context) ([]store.Presence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.Presence{}
	for _, id := range s.presenceOrder {
		out = append(out, copyPresence(s.presence[id]))
	}
	return out, nil
}

// DropPresence loses a record the way a shared store does (a TTL, a
// restart), so the relay's rebuild after a presence miss can be tested.
// A test hook (storetest.PresenceDropper); nothing in production calls it.
func (s *Store) DropPresence(ctx context.Context, runnerID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.presence, runnerID)
	s.presenceOrder = slices.DeleteFunc(s.presenceOrder, func(id string) bool { return id == runnerID })
	return nil
}
