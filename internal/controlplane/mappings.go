package controlplane

import (
	"context"
	"slices"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// MaxOwnerDevices bounds the device records an approval lets one owner
// hold (revoked ones included, since their records stay). The enqueue's
// satisfiable question reads every one of them, and their presence.
const MaxOwnerDevices = 100

// MapRequest is POST /admin/mappings: the service that answers one
// person's (purpose, kind) at one site. Purpose "" is the reserved purpose
// (projection.ReservedPurpose), which a stub naming none is judged under;
// ServiceOwner "" is the person's own namespace.
type MapRequest struct {
	Owner        string `json:"owner"`
	SiteID       string `json:"siteId"`
	Purpose      string `json:"purpose,omitempty"`
	Kind         string `json:"kind"`
	Service      string `json:"service"`
	ServiceOwner string `json:"serviceOwner,omitempty"`
}

// UnmapRequest is POST /admin/mappings/delete.
type UnmapRequest struct {
	Owner   string `json:"owner"`
	SiteID  string `json:"siteId"`
	Purpose string `json:"purpose,omitempty"`
	Kind    string `json:"kind"`
}

// MappingsResponse answers a mapping change: the consent's mappings after
// it.
type MappingsResponse struct {
	Version  int64                `json:"version"`
	Owner    string               `json:"owner"`
	SiteID   string               `json:"siteId"`
	Mappings []projection.Mapping `json:"mappings"`
}

// Validate implements protocol.Validator.
func (r MapRequest) Validate() error {
	return firstError(need("owner", r.Owner), need("siteId", r.SiteID), need("kind", r.Kind), need("service", r.Service))
}

// Validate implements protocol.Validator.
func (r UnmapRequest) Validate() error {
	return firstError(need("owner", r.Owner), need("siteId", r.SiteID), need("kind", r.Kind))
}

// slotPurpose is the purpose a mapping is stored under: the reserved one
// for a request that names none, as for a stub that names none.
func slotPurpose(purpose string) string {
	if purpose == "" {
		return projection.ReservedPurpose
	}
	return purpose
}

// Map sets the service that answers owner's (purpose, kind) at siteID,
// replacing the one mapped before. The consent must stand (a paused one
// does: a pause keeps its mappings, and the person may prepare them).
// A service in another person's namespace must be a teammate's: that
// person's rosters must name owner, or no device of theirs may ever run
// owner's work and the slot would wait forever.
func (a *Admin) Map(ctx context.Context, req MapRequest) (MappingsResponse, error) {
	if err := req.Validate(); err != nil {
		return MappingsResponse{}, invalid("%v", err)
	}
	purpose := slotPurpose(req.Purpose)
	m := projection.Mapping{Purpose: purpose, Kind: req.Kind, Service: req.Service}
	if req.ServiceOwner != req.Owner {
		m.ServiceOwner = req.ServiceOwner
	}
	keys := []string{ownerKey(req.Owner)}
	if m.ServiceOwner != "" {
		keys = append(keys, ownerKey(m.ServiceOwner))
	}
	return a.changeMappings(ctx, "slot mapped", req.Owner, req.SiteID, keys, func(f *projection.Fixture, ms []projection.Mapping) ([]projection.Mapping, error) {
		if m.ServiceOwner != "" && !teammate(f, m.ServiceOwner, req.Owner) {
			return nil, conflict("no roster of %q names %q: %q's devices may not run %q's work", m.ServiceOwner, req.Owner, m.ServiceOwner, req.Owner)
		}
		ms = slices.DeleteFunc(ms, func(x projection.Mapping) bool { return x.Purpose == m.Purpose && x.Kind == m.Kind })
		if len(ms) >= projection.MaxMappings {
			return nil, conflict("%q has %d mappings for site %q, the most one consent may hold", req.Owner, len(ms), req.SiteID)
		}
		return append(ms, m), nil
	}, "purpose", purpose, "kind", req.Kind, "service", req.Service, "serviceOwner", m.ServiceOwner)
}

// Unmap removes owner's mapping of (purpose, kind) at siteID: jobs for the
// slot are then declined unmapped, and refused at enqueue, until it is
// mapped again.
func (a *Admin) Unmap(ctx context.Context, req UnmapRequest) (MappingsResponse, error) {
	if err := req.Validate(); err != nil {
		return MappingsResponse{}, invalid("%v", err)
	}
	purpose := slotPurpose(req.Purpose)
	return a.changeMappings(ctx, "slot unmapped", req.Owner, req.SiteID, []string{ownerKey(req.Owner)}, func(f *projection.Fixture, ms []projection.Mapping) ([]projection.Mapping, error) {
		i := slices.IndexFunc(ms, func(x projection.Mapping) bool { return x.Purpose == purpose && x.Kind == req.Kind })
		if i < 0 {
			return nil, notFound("%q has no mapping of purpose %q, kind %q at site %q", req.Owner, purpose, req.Kind, req.SiteID)
		}
		return slices.Delete(ms, i, i+1), nil
	}, "purpose", purpose, "kind", req.Kind)
}

// changeMappings applies change to the mappings of owner's standing
// consent to siteID, reading keys (owner's partition first), and writes
// them to every record of the pair, as setPaused does.
func (a *Admin) changeMappings(ctx context.Context, what, owner, siteID string, keys []string,
	change func(f *projection.Fixture, ms []projection.Mapping) ([]projection.Mapping, error), logArgs ...any) (MappingsResponse, error) {
	if err := firstError(withinBound("owner", owner, store.MaxOwnerBytes), withinBound("siteId", siteID, store.MaxSiteIDBytes)); err != nil {
		return MappingsResponse{}, err
	}
	out := MappingsResponse{Owner: owner, SiteID: siteID}
	version, err := a.store.update(ctx, keys, func(f *projection.Fixture) error {
		if err := standing(f, owner, siteID); err != nil {
			return err
		}
		i := slices.IndexFunc(f.Consents, func(c projection.ConsentRecord) bool { return c.Owner == owner && c.SiteID == siteID })
		ms, err := change(f, slices.Clone(f.Consents[i].Mappings))
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			ms = nil
		}
		f.Consents = slices.Clone(f.Consents)
		for j, c := range f.Consents {
			if c.Owner == owner && c.SiteID == siteID {
				f.Consents[j].Mappings = ms
			}
		}
		out.Mappings = ms
		return nil
	})
	if err != nil {
		return MappingsResponse{}, err
	}
	if out.Mappings == nil {
		out.Mappings = []projection.Mapping{}
	}
	out.Version = version
	a.log.InfoContext(ctx, what, append([]any{"owner", owner, "site", siteID, "version", version}, logArgs...)...)
	return out, nil
}

// teammate says whether one of owner's rosters names member: whether
// owner's devices may run member's work.
func teammate(f *projection.Fixture, owner, member string) bool {
	return slices.ContainsFunc(f.Rosters, func(r projection.RosterRecord) bool {
		return r.Owner == owner && slices.Contains(r.Members, member)
	})
}

// SetSitePurposes replaces the purposes a site declares. None declares
// every purpose; a non-empty list refuses, at enqueue, a stub whose
// purpose (the reserved one when it names none) is not in it.
func (a *Admin) SetSitePurposes(ctx context.Context, siteID string, purposes []string) (projection.SiteRecord, int64, error) {
	if err := withinBound("siteId", siteID, store.MaxSiteIDBytes); err != nil {
		return projection.SiteRecord{}, 0, err
	}
	if len(purposes) == 0 {
		purposes = nil
	}
	var record projection.SiteRecord
	version, err := a.store.updateSite(ctx, siteID, []string{siteKey(siteID)}, func(f *projection.Fixture) error {
		i := slices.IndexFunc(f.Sites, func(s projection.SiteRecord) bool { return s.SiteID == siteID })
		if i < 0 {
			return notFound("no site %q is registered", siteID)
		}
		f.Sites = slices.Clone(f.Sites)
		f.Sites[i].Purposes = slices.Clone(purposes)
		record = f.Sites[i]
		return nil
	})
	if err != nil {
		return projection.SiteRecord{}, 0, err
	}
	a.log.InfoContext(ctx, "site purposes set", "site", siteID, "purposes", purposes, "version", version)
	return record, version, nil
}

// SitePurposesRequest is PUT /admin/sites/{siteId}/purposes.
type SitePurposesRequest struct {
	Purposes []string `json:"purposes"`
}

// Validate implements protocol.Validator.
func (r SitePurposesRequest) Validate() error { return nil }

// need is a decode problem when a required field is empty.
func need(path, s string) error {
	if s == "" {
		return &protocol.DecodeError{Path: path, Problem: "must not be empty"}
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
