package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/byorelay/byorelay/projection"
)

// Snapshot is the stored fixture at one version. Version 0 with no Data is
// the projection before anything was ever written: the empty fixture, under
// which nothing routes.
type Snapshot struct {
	Version int64
	Data    []byte
}

// Storage holds the fixture as one versioned document, shared by every
// relay instance.
type Storage interface {
	// Version is the current version, read so that a change committed by any
	// instance before the call began is seen. It is called on every relay
	// request, so it must be cheap.
	Version(ctx context.Context) (int64, error)
	// Load is the current document, read as Version is.
	Load(ctx context.Context) (Snapshot, error)
	// Swap stores data as the next version if and only if the document is
	// still at version expect, and returns the new version. Otherwise it
	// returns ErrVersionConflict and changes nothing.
	Swap(ctx context.Context, expect int64, data []byte) (int64, error)
}

// updateAttempts bounds how often Update re-applies a change that lost to a
// concurrent one. Admin changes are rare and human-paced; eight losses in a
// row means something is writing in a loop, and the caller should hear so.
const updateAttempts = 8

// Store is the projection as the relay and the admin API see it. The relay
// uses it as its projection source; every instance (Lambda container) has
// its own Store over the shared Storage.
//
// Each Projection call reads the version (one small strongly consistent
// read) and reloads the whole document only when it changed, so a change
// made through any instance is in force on the very next request on every
// instance: revocation must not wait for a cache to expire.
type Store struct {
	storage Storage

	mu      sync.Mutex
	version int64
	current *projection.Projection
}

// NewStore returns a Store over storage.
func NewStore(storage Storage) *Store {
	return &Store{storage: storage}
}

// Projection returns the projection in force now.
func (s *Store) Projection(ctx context.Context) (*projection.Projection, error) {
	version, err := s.storage.Version(ctx)
	if err != nil {
		return nil, fmt.Errorf("projection version: %w", err)
	}
	s.mu.Lock()
	if s.current != nil && s.version == version {
		p := s.current
		s.mu.Unlock()
		return p, nil
	}
	s.mu.Unlock()

	snap, err := s.storage.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load projection: %w", err)
	}
	f, err := decode(snap)
	if err != nil {
		return nil, err
	}
	p, err := projection.New(f)
	if err != nil {
		return nil, fmt.Errorf("projection v%d: %w", snap.Version, err)
	}
	s.mu.Lock()
	// A concurrent call may have loaded a newer version meanwhile; never
	// move the cache backwards.
	if s.current == nil || snap.Version >= s.version {
		s.version, s.current = snap.Version, p
	}
	s.mu.Unlock()
	return p, nil
}

// Scoped returns the projection in force now for a request about q. The
// document is read whole (Projection), and the whole projection answers
// every question a request about q asks exactly as its scope does
// (projection.Fixture.Scope), so it is handed back as it is rather than
// cut down on every request.
func (s *Store) Scoped(ctx context.Context, _ projection.Query) (*projection.Projection, error) {
	return s.Projection(ctx)
}

// Fixture returns the stored fixture and its version.
func (s *Store) Fixture(ctx context.Context) (projection.Fixture, int64, error) {
	snap, err := s.storage.Load(ctx)
	if err != nil {
		return projection.Fixture{}, 0, fmt.Errorf("load projection: %w", err)
	}
	f, err := decode(snap)
	return f, snap.Version, err
}

// Update applies change to the current fixture and stores the result,
// conditional on the version it read. When another change landed first,
// change runs again on the fresh fixture, so it must compute everything
// from the fixture it is given (and nothing it must not repeat). An error
// from change stops the update and is returned as it is; nothing is
// written. The result must still be a valid fixture.
func (s *Store) Update(ctx context.Context, change func(f *projection.Fixture) error) (int64, error) {
	for range updateAttempts {
		snap, err := s.storage.Load(ctx)
		if err != nil {
			return 0, fmt.Errorf("load projection: %w", err)
		}
		f, err := decode(snap)
		if err != nil {
			return 0, err
		}
		if err := change(&f); err != nil {
			return 0, err
		}
		p, err := projection.New(f)
		if err != nil {
			return 0, invalid("the result is not a valid projection: %v", err)
		}
		// Encoded from the projection's normalised copy: a list left nil in
		// Go would be stored as null, which the strict parse refuses.
		data, err := json.Marshal(p.Fixture())
		if err != nil {
			return 0, fmt.Errorf("encode projection: %w", err)
		}
		version, err := s.storage.Swap(ctx, snap.Version, data)
		if errors.Is(err, ErrVersionConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return version, nil
	}
	return 0, errBusy
}

// decode parses a stored document. It is parsed as strictly as an import,
// because a document that no longer parses must stop the relay loudly
// rather than route on half of it.
func decode(snap Snapshot) (projection.Fixture, error) {
	if len(snap.Data) == 0 {
		return projection.EmptyFixture(), nil
	}
	f, err := projection.Parse(snap.Data)
	if err != nil {
		return projection.Fixture{}, fmt.Errorf("stored projection v%d does not parse: %w", snap.Version, err)
	}
	return f, nil
}
