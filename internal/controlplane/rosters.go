package controlplane

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/internal/projection"
)

// MaxRosterMembers bounds a roster an admin change writes. Every request of
// a device whose owner holds the roster reads each member's partition
// (their consents decide the routes), so a member is one more read on each
// of those requests.
const MaxRosterMembers = 200

// PutRoster creates or replaces the roster with this id. Members may run
// their work on the owner's machines; the owner is not implicitly one.
func (a *Admin) PutRoster(ctx context.Context, id, owner string, members []string) (projection.RosterRecord, int64, error) {
	if id == "" || owner == "" {
		return projection.RosterRecord{}, 0, invalid("roster id and owner must not be empty")
	}
	if members == nil {
		members = []string{}
	}
	if len(members) > MaxRosterMembers {
		return projection.RosterRecord{}, 0, invalid("a roster has at most %d members", MaxRosterMembers)
	}
	if slices.Contains(members, "") {
		return projection.RosterRecord{}, 0, invalid("roster members must not be empty")
	}
	record := projection.RosterRecord{ID: id, Owner: owner, Members: slices.Clone(members)}
	version, err := a.store.update(ctx, []string{rosterKey(id)}, func(f *projection.Fixture) error {
		i := slices.IndexFunc(f.Rosters, func(r projection.RosterRecord) bool { return r.ID == id })
		if i < 0 {
			f.Rosters = append(f.Rosters, record)
			return nil
		}
		// Replaced in place, and any duplicate of the id dropped: a stale
		// copy would keep granting what the edit took away.
		rosters := slices.Clone(f.Rosters)
		rosters[i] = record
		f.Rosters = slices.Concat(rosters[:i+1], slices.DeleteFunc(rosters[i+1:], func(r projection.RosterRecord) bool { return r.ID == id }))
		return nil
	})
	if err != nil {
		return projection.RosterRecord{}, 0, err
	}
	a.log.InfoContext(ctx, "roster set", "roster", id, "owner", owner, "members", len(members), "version", version)
	return record, version, nil
}

// DeleteRoster removes the roster with this id.
func (a *Admin) DeleteRoster(ctx context.Context, id string) (int64, error) {
	if id == "" {
		return 0, invalid("roster id must not be empty")
	}
	version, err := a.store.update(ctx, []string{rosterKey(id)}, func(f *projection.Fixture) error {
		if !slices.ContainsFunc(f.Rosters, func(r projection.RosterRecord) bool { return r.ID == id }) {
			return notFound("no roster %q", id)
		}
		f.Rosters = slices.DeleteFunc(slices.Clone(f.Rosters), func(r projection.RosterRecord) bool { return r.ID == id })
		return nil
	})
	if err != nil {
		return 0, err
	}
	a.log.InfoContext(ctx, "roster deleted", "roster", id, "version", version)
	return version, nil
}
