package controlplane

import (
	"context"

	"github.com/byorelay/byorelay/internal/projection"
)

// Partition names what a Storage read answers, so an external test can
// wrap a Storage.
type Partition = partition

// ScopedVia is Store.Scoped reading every site through copy k (-1: the
// home), so a test can drive a request through each copy in turn.
func ScopedVia(s *Store, ctx context.Context, q projection.Query, k int) (*projection.Projection, error) {
	return s.scoped(ctx, q, k)
}

// SiteCopies is how many read copies of each site s keeps.
func SiteCopies(s Storage) int { return s.siteCopies() }

// SiteCopyKey is copy k's partition key.
func SiteCopyKey(siteID string, k int) string { return siteCopyKey(siteID, k) }

// CopyFor is the copy a request about q reads, of n.
func CopyFor(q projection.Query, n int) int { return copyFor(q, n) }

// FanOut writes site's copies from its home, as a change does after it
// commits.
func FanOut(s Storage, ctx context.Context, siteID string) error { return s.fanOut(ctx, siteID) }

// TableOf is a DynamoStorage's table.
func TableOf(s Storage) string { return s.(*DynamoStorage).table }
