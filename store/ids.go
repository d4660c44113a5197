package store

import "github.com/byorelay/byorelay/internal/platform/ids"

// NewLeaseID mints a lease id: a random UUID (ids.UUID, which says why a
// UUID).
func NewLeaseID() string { return ids.UUID() }
