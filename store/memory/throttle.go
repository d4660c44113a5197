package memory

import (
	"context"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/store"
)

// TakeToken takes one token from the named bucket.
func (s *Store) TakeToken(_ context.Context, bucket string, burst, refillMs int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets == nil {
		s.buckets = map[string]store.Bucket{}
	}
	b, ok := s.buckets[bucket].Take(clock.EpochMs(s.clock.Now()), burst, refillMs)
	s.buckets[bucket] = b
	return ok, nil
}
