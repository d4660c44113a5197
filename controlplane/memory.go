package controlplane

import (
	"context"
	"slices"
	"sync"
)

// MemoryStorage is Storage in one process's memory, for tests and the local
// stack. Several Stores over one MemoryStorage behave as several instances
// over one table.
type MemoryStorage struct {
	mu      sync.Mutex
	version int64
	data    []byte
}

// NewMemoryStorage returns an empty storage: version 0, the empty fixture.
func NewMemoryStorage() *MemoryStorage { return &MemoryStorage{} }

// Version is the current version.
func (m *MemoryStorage) Version(ctx context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// Load is the current document.
func (m *MemoryStorage) Load(ctx context.Context) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Snapshot{Version: m.version, Data: slices.Clone(m.data)}, nil
}

// Swap stores data as the next version if the document is at expect.
func (m *MemoryStorage) Swap(ctx context.Context, expect int64, data []byte) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.version != expect {
		return 0, ErrVersionConflict
	}
	m.version++
	m.data = slices.Clone(data)
	return m.version, nil
}
