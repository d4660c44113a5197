package controlplane

import (
	"context"
	"log/slog"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Admin makes the control plane's changes to the projection. Each change is
// checked in full before anything is written, and a refusal (an *Error)
// leaves the projection as it was. Every change that lands is logged.
type Admin struct {
	store    *Store
	pairings store.PairingCodes
	presence Presences
	queue    store.QueuedLister
	clock    clock.Clock
	log      *slog.Logger
}

// AdminConfig wires an Admin. Store is required.
type AdminConfig struct {
	Store *Store
	// Pairings is where the relay keeps pending pairings; without it,
	// approval by user code is refused.
	Pairings store.PairingCodes
	// Presence and Queue are the routing store's presence and queues, which
	// the person view and map-unique read; without them those answer 501.
	Presence Presences
	Queue    store.QueuedLister
	// Clock stamps a rotated key's retirement; the system clock if nil.
	Clock  clock.Clock
	Logger *slog.Logger
}

// NewAdmin returns an Admin.
func NewAdmin(cfg AdminConfig) *Admin {
	a := &Admin{store: cfg.Store, pairings: cfg.Pairings, presence: cfg.Presence, queue: cfg.Queue, clock: cfg.Clock, log: cfg.Logger}
	if a.clock == nil {
		a.clock = clock.System{}
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a
}

// Export returns the whole projection as stored, when it has at most
// MaxWholeExportRecords records; a larger one is exported page by page
// (ExportPage).
func (a *Admin) Export(ctx context.Context) (projection.Fixture, error) {
	var all []record
	cursor := ""
	for {
		recs, next, err := a.store.storage.List(ctx, cursor)
		if err != nil {
			return projection.Fixture{}, err
		}
		all = append(all, recs...)
		if len(all) > MaxWholeExportRecords {
			return projection.Fixture{}, tooLargeToExport
		}
		if next == "" {
			return fixtureOf(all), nil
		}
		cursor = next
	}
}

// Import replaces the whole projection with f, as the reference's
// project(fixture) does: ImportPage with all of f, then FinishImport to
// the end. Beyond the schema, every public identity in it (sites,
// devices, succession links) must verify and every succession chain must
// lead to its site's current key: the relay hands these to daemons, which
// would refuse a site whose chain is broken.
func (a *Admin) Import(ctx context.Context, f projection.Fixture) (ImportResult, error) {
	id := NewImportID()
	page, err := a.importPage(ctx, ImportPageRequest{Import: id, Fixture: f})
	if err != nil {
		return ImportResult{}, err
	}
	res := ImportResult{Written: page.Written}
	cursor := ""
	for {
		fin, err := a.FinishImport(ctx, ImportFinishRequest{Import: id, Cursor: cursor})
		if err != nil {
			return ImportResult{}, err
		}
		res.Removed += fin.Removed
		if fin.Next == "" {
			res.Version = fin.Version
			break
		}
		cursor = fin.Next
	}
	a.log.InfoContext(ctx, "projection imported", "import", id, "written", res.Written, "removed", res.Removed,
		"sites", len(f.Sites), "consents", len(f.Consents), "devices", len(f.Devices),
		"rosters", len(f.Rosters), "revoked", len(f.Revoked))
	return res, nil
}

func checkIdentities(f projection.Fixture) error {
	for _, s := range f.Sites {
		if !protocol.VerifyPublicIdentity(s.Site) {
			return invalid("site %q: its encryption key is not signed by its identity key", s.SiteID)
		}
		if len(s.Succeeds) == 0 {
			continue
		}
		current, err := protocol.KeyID(s.Site.Identity)
		if err != nil {
			return invalid("site %q: %v", s.SiteID, err)
		}
		walk := protocol.WalkSuccession(current, s.Succeeds, func(string) bool { return false })
		if walk.Failure != protocol.SuccessionUnknownOrigin {
			return invalid("site %q: its succession chain does not verify (%s)", s.SiteID, walk.Failure)
		}
	}
	for _, d := range f.Devices {
		if !protocol.VerifyPublicIdentity(d.Device) {
			return invalid("device %q: its encryption key is not signed by its identity key", d.RunnerID)
		}
	}
	return nil
}
