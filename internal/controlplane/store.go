package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/byorelay/byorelay/internal/projection"
)

// partition is what a Storage read of one partition found: its records in
// seq order, and its version (0 when it was never changed one record at a
// time), which a commit is conditioned on.
type partition struct {
	version int64
	records []record
}

// commit is one change: records put (a record with the seq of one stored
// replaces it) and records deleted, all or nothing, and only while every
// partition in read is still at the version read. A partition the change
// writes and did not read has its version moved all the same, so a change
// that read it concurrently loses.
type commit struct {
	read map[string]int64
	put  []record
	del  []record
}

// Storage holds the projection's records, shared by every relay instance.
// Its methods take the package's own record types: the two
// implementations are DynamoStorage and MemoryStorage.
type Storage interface {
	// Read is the named partitions as of now: a write that finished before
	// the call began is seen. Absent partitions read as empty.
	Read(ctx context.Context, keys []string) (map[string]partition, error)
	// Commit applies c atomically, or returns ErrVersionConflict and
	// changes nothing.
	Commit(ctx context.Context, c commit) error
	// PutRecords writes records as part of the import gen, unconditionally
	// and not atomically: an import is a bulk replacement, not a change.
	PutRecords(ctx context.Context, gen string, recs []record) error
	// SweepStale removes one page of the records (and partition versions)
	// no write of import gen wrote, resuming after cursor ("" to start);
	// next is "" when none are left.
	SweepStale(ctx context.Context, gen, cursor string) (removed int, next string, err error)
	// List is one page of every record, each once, resuming after cursor;
	// next is "" after the last page.
	List(ctx context.Context, cursor string) (recs []record, next string, err error)
	// siteCopies is how many read copies of each site's home partition the
	// storage keeps (copies.go), 0 for none: a request then reads the home.
	// PutRecords writes the copies of the sites it writes, SweepStale
	// removes those no import wrote, List skips them.
	siteCopies() int
	// fanOut writes a site's home partition, as it is when called, to
	// every copy holding an older version of it.
	fanOut(ctx context.Context, siteID string) error
}

// updateAttempts bounds how often Update re-applies a change that lost to a
// concurrent one. Admin changes are rare and human-paced; eight losses in a
// row means something is writing in a loop, and the caller should hear so.
const updateAttempts = 8

// scopeRounds bounds the reads of one scope: device, then its owner, then
// the owner's roster members, then the sites their consents name.
const scopeRounds = 4

// Store is the projection as the relay and the admin API see it. The relay
// uses it as its projection source; every instance (Lambda container) has
// its own Store over the shared Storage. It caches nothing: each request
// reads the records that decide it, strongly consistent, so a pause or a
// revocation made through any instance is in force on the very next
// request on every instance.
type Store struct {
	storage Storage
	now     func() time.Time
}

// NewStore returns a Store over storage.
func NewStore(storage Storage) *Store {
	return &Store{storage: storage, now: time.Now}
}

// Scoped returns the projection in force now for a request about q: the
// records projection.Fixture.Scope names, read partition by partition
// (the device's, its owner's, the owner's roster members', the sites
// their consents name), and nothing else.
func (s *Store) Scoped(ctx context.Context, q projection.Query) (*projection.Projection, error) {
	via := -1
	if n := s.storage.siteCopies(); n > 0 {
		via = copyFor(q, n)
	}
	return s.scoped(ctx, q, via)
}

// scoped is Scoped reading every site through its copy number via, or at
// its home when via is -1.
func (s *Store) scoped(ctx context.Context, q projection.Query, via int) (*projection.Projection, error) {
	site := func(id string) string {
		if via < 0 {
			return siteKey(id)
		}
		return siteCopyKey(id, via)
	}
	read := map[string]partition{}
	var recs []record
	want := func(f projection.Fixture) []string {
		keys := []string{}
		add := func(k string) {
			if _, done := read[k]; !done && !contains(keys, k) {
				keys = append(keys, k)
			}
		}
		if q.RunnerID != "" {
			add(deviceKey(q.RunnerID))
		}
		if q.DeviceIdentity != "" {
			add(identityKey(q.DeviceIdentity))
		}
		if q.Owner != "" {
			add(ownerKey(q.Owner))
		}
		if q.SiteID != "" {
			add(site(q.SiteID))
		}
		for _, d := range f.Devices {
			add(ownerKey(d.Owner))
		}
		for _, r := range f.Rosters {
			for _, m := range r.Members {
				add(ownerKey(m))
			}
		}
		for _, c := range f.Consents {
			add(site(c.SiteID))
		}
		return keys
	}
	scope := projection.EmptyFixture()
	for range scopeRounds + 1 {
		keys := want(scope)
		if len(keys) == 0 {
			return projection.New(scope)
		}
		got, err := s.storage.Read(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("read projection records: %w", err)
		}
		for _, k := range keys {
			read[k] = got[k]
			recs = append(recs, got[k].records...)
		}
		scope = fixtureOf(recs).Scope(q)
	}
	return nil, errors.New("projection scope did not settle")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Projection is the whole projection, read page by page. For the local
// debug page and small deployments only: nothing on the request path
// calls it.
func (s *Store) Projection(ctx context.Context) (*projection.Projection, error) {
	f, err := s.Fixture(ctx)
	if err != nil {
		return nil, err
	}
	return projection.New(f)
}

// Empty says whether no record is stored, reading only until it finds one.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	cursor := ""
	for {
		recs, next, err := s.storage.List(ctx, cursor)
		if err != nil {
			return false, fmt.Errorf("list projection records: %w", err)
		}
		if len(recs) > 0 {
			return false, nil
		}
		if next == "" {
			return true, nil
		}
		cursor = next
	}
}

// Fixture is the whole stored projection, in seq order.
func (s *Store) Fixture(ctx context.Context) (projection.Fixture, error) {
	var all []record
	cursor := ""
	for {
		recs, next, err := s.storage.List(ctx, cursor)
		if err != nil {
			return projection.Fixture{}, fmt.Errorf("list projection records: %w", err)
		}
		all = append(all, recs...)
		if next == "" {
			return fixtureOf(all), nil
		}
		cursor = next
	}
}

// update reads the partitions keys name, hands change the fixture of their
// records (in registry order), and writes what change made different:
// records added, removed and changed, one commit conditioned on every
// partition read. When another change landed first, change runs again on
// the fresh records, so it must compute everything from the fixture it is
// given. An error from change stops the update and is returned as it is;
// nothing is written.
//
// keys must name every partition whose records the change decides on: a
// change can only see, and be kept safe from races on, what it read.
//
// A commit that changes a site's records writes the site's read copies
// before update returns (Storage.fanOut), so the change is in force on the
// next request through every copy.
func (s *Store) update(ctx context.Context, keys []string, change func(f *projection.Fixture) error) (int64, error) {
	return s.updateSite(ctx, "", keys, change)
}

// updateSite is update for a change of site siteID ("" for none): whatever
// the change comes to (written, nothing to write, or refused), the site's
// copies are written from its home before it returns. A change whose copy
// writes failed is therefore repaired by running it again, even when its
// second run finds nothing left to change or is refused because the first
// run's change stands.
func (s *Store) updateSite(ctx context.Context, siteID string, keys []string, change func(f *projection.Fixture) error) (int64, error) {
	fan := func(sites ...string) error {
		seen := map[string]bool{}
		for _, id := range sites {
			if id == "" || seen[id] {
				continue
			}
			seen[id] = true
			if err := s.storage.fanOut(ctx, id); err != nil {
				return err
			}
		}
		return nil
	}
	for range updateAttempts {
		got, err := s.storage.Read(ctx, keys)
		if err != nil {
			return 0, fmt.Errorf("read projection records: %w", err)
		}
		c := commit{read: map[string]int64{}}
		var recs []record
		for _, k := range keys {
			c.read[k] = got[k].version
			recs = append(recs, got[k].records...)
		}
		before := fixtureOf(recs)
		after := fixtureOf(recs)
		if err := change(&after); err != nil {
			var refused *Error
			if errors.As(err, &refused) {
				if ferr := fan(siteID); ferr != nil {
					return 0, ferr
				}
			}
			return 0, err
		}
		if _, err := projection.New(after); err != nil {
			return 0, invalid("the result is not a valid projection: %v", err)
		}
		now := s.now()
		c.put, c.del, err = diff(before, after, recs, now)
		if err != nil {
			return 0, err
		}
		if err := checkSizes(c.put); err != nil {
			return 0, err
		}
		if len(c.put)+len(c.del) == 0 {
			return now.UnixMilli(), fan(siteID)
		}
		err = s.storage.Commit(ctx, c)
		if errors.Is(err, ErrVersionConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return now.UnixMilli(), fan(append(changedSites(c), siteID)...)
	}
	if err := fan(siteID); err != nil {
		return 0, err
	}
	return 0, errBusy
}

// changedSites are the ids of the sites whose records c puts or deletes.
func changedSites(c commit) []string {
	var out []string
	for _, r := range append(slices.Clone(c.put), c.del...) {
		if r.Site != nil {
			out = append(out, r.Site.SiteID)
		}
	}
	return out
}
