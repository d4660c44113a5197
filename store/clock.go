package store

import "github.com/byorelay/byorelay/internal/platform/clock"

// Clock is the one time source for every deadline a store stamps or
// enforces (Options.Clock): the platform clock, named here for importers,
// who implement it with a Now method. Its rule is clock.Clock's: the store
// owns the time, callers never pass an instant in.
type Clock = clock.Clock
