package controlplane

import (
	"context"
	"net/http"
	"slices"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// The operator's view of one person, and the upgrade's one command. Both
// read the whole projection (refused past MaxWholeExportRecords records,
// like GET /admin/fixture) and presence: admin reads, never on a request
// path.

// MaxListedWaiting bounds the queued jobs the person view lists per site.
const MaxListedWaiting = 20

// maxViewDevices bounds the presence reads of one view: the person's and
// their teammates' devices.
const maxViewDevices = 200

// AdvertisedService is one service a device advertised for a kind, as its
// presence last said.
type AdvertisedService struct {
	Owner      string `json:"owner"`
	RunnerID   string `json:"runnerId"`
	Kind       string `json:"kind"`
	Service    string `json:"service"`
	OfferScope string `json:"offerScope"`
	// Live: seen within PresenceLiveMs.
	Live       bool  `json:"live"`
	LastSeenAt int64 `json:"lastSeenAt"`
}

// WaitingJob is a queued job whose slot (purpose, kind) has no mapping:
// with grants on it is declined unmapped on every claim until mapped.
type WaitingJob struct {
	JobID      string `json:"jobId"`
	Purpose    string `json:"purpose"`
	Kind       string `json:"kind"`
	DeadlineAt int64  `json:"deadlineAt"`
	// Candidates are the live services that could answer it: the person's
	// own devices' for the kind, and their teammates' offered to the team.
	Candidates []AdvertisedService `json:"candidates"`
}

// PersonSite is one of the person's standing consents.
type PersonSite struct {
	SiteID   string               `json:"siteId"`
	Paused   bool                 `json:"paused"`
	Mappings []projection.Mapping `json:"mappings"`
	// Purposes the site declares; none declares every purpose.
	Purposes []string     `json:"purposes,omitempty"`
	Waiting  []WaitingJob `json:"waiting"`
	// MoreWaiting: more queued jobs than MaxListedWaiting were read.
	MoreWaiting bool `json:"moreWaiting,omitempty"`
}

// PersonResponse is GET /admin/people/{owner}.
type PersonResponse struct {
	Owner string `json:"owner"`
	// Teammates are the people whose rosters name this person: whose
	// devices may run their work.
	Teammates []string     `json:"teammates"`
	Sites     []PersonSite `json:"sites"`
	// Services are what the person's and their teammates' devices
	// advertise, live or not.
	Services []AdvertisedService `json:"services"`
	// Now is the store clock the liveness was judged by (epoch ms).
	Now int64 `json:"now"`
}

var noPresence = &Error{Status: http.StatusNotImplemented, Code: "not-implemented", Message: "this control plane has no routing store to read presence and queues from"}

// Person is the operator's view of owner: their consents and mappings,
// the services they could map, and their queued jobs that wait on a slot
// nobody mapped, with the live services that could answer each.
func (a *Admin) Person(ctx context.Context, owner string) (PersonResponse, error) {
	if a.presence == nil || a.queue == nil {
		return PersonResponse{}, noPresence
	}
	if err := firstError(need("owner", owner), withinBound("owner", owner, store.MaxOwnerBytes)); err != nil {
		return PersonResponse{}, invalid("%v", err)
	}
	f, err := a.Export(ctx)
	if err != nil {
		return PersonResponse{}, err
	}
	p, err := projection.New(f)
	if err != nil {
		return PersonResponse{}, err
	}
	out := PersonResponse{Owner: owner, Teammates: []string{}, Sites: []PersonSite{}}
	for _, r := range f.Rosters {
		if r.Owner != owner && slices.Contains(r.Members, owner) && !slices.Contains(out.Teammates, r.Owner) {
			out.Teammates = append(out.Teammates, r.Owner)
		}
	}
	if out.Now, err = a.presence.Now(ctx); err != nil {
		return PersonResponse{}, err
	}
	if out.Services, err = a.advertisedBy(ctx, f, append([]string{owner}, out.Teammates...), out.Now); err != nil {
		return PersonResponse{}, err
	}
	for _, s := range p.SitesFor(owner) {
		c, _ := p.ConsentFor(owner, s.SiteID)
		site := PersonSite{SiteID: s.SiteID, Paused: c.Paused, Mappings: c.Mappings, Purposes: s.Purposes, Waiting: []WaitingJob{}}
		if site.Mappings == nil {
			site.Mappings = []projection.Mapping{}
		}
		queued, err := a.queue.QueuedFor(ctx, s.SiteID, owner, MaxListedWaiting+1)
		if err != nil {
			return PersonResponse{}, err
		}
		if len(queued) > MaxListedWaiting {
			queued, site.MoreWaiting = queued[:MaxListedWaiting], true
		}
		for _, j := range queued {
			purpose := slotPurpose(j.Stub.Purpose)
			if _, mapped := p.MappingFor(owner, s.SiteID, purpose, j.Stub.Kind); mapped {
				continue
			}
			w := WaitingJob{JobID: j.ID, Purpose: purpose, Kind: j.Stub.Kind, DeadlineAt: j.Stub.DeadlineAt, Candidates: []AdvertisedService{}}
			for _, svc := range out.Services {
				if svc.Live && svc.Kind == j.Stub.Kind && (svc.Owner == owner || svc.OfferScope == protocol.AudienceTeam) {
					w.Candidates = append(w.Candidates, svc)
				}
			}
			site.Waiting = append(site.Waiting, w)
		}
		out.Sites = append(out.Sites, site)
	}
	return out, nil
}

// advertisedBy is every service the owners' devices (not revoked)
// advertised, by presence, at most maxViewDevices devices.
func (a *Admin) advertisedBy(ctx context.Context, f projection.Fixture, owners []string, now int64) ([]AdvertisedService, error) {
	out := []AdvertisedService{}
	read := 0
	for _, o := range owners {
		for _, runner := range devicesOf(f, o) {
			if read == maxViewDevices {
				return out, nil
			}
			read++
			pr, ok, err := a.presence.Presence(ctx, runner)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			for _, c := range pr.Capabilities {
				out = append(out, AdvertisedService{Owner: o, RunnerID: runner, Kind: c.Kind, Service: c.Service, OfferScope: c.OfferScope,
					Live: now-pr.LastSeenAt <= PresenceLiveMs, LastSeenAt: pr.LastSeenAt})
			}
		}
	}
	return out, nil
}

// MapUniqueRequest is POST /admin/mappings/unique.
type MapUniqueRequest struct {
	// DryRun says what would be mapped and maps nothing.
	DryRun bool `json:"dryRun" wire:"default"`
}

// Validate implements protocol.Validator.
func (MapUniqueRequest) Validate() error { return nil }

// UniqueSlot is one slot map-unique looked at.
type UniqueSlot struct {
	Owner   string `json:"owner"`
	SiteID  string `json:"siteId"`
	Purpose string `json:"purpose"`
	Kind    string `json:"kind"`
	// Service is what was (or, in a dry run, would be) mapped; "" when
	// nothing was.
	Service string `json:"service,omitempty"`
	// Offered are the services the owner's devices advertise for the kind,
	// when there is not exactly one (none, or a choice only the person can
	// make).
	Offered []string `json:"offered,omitempty"`
}

// MapUniqueResponse answers map-unique.
type MapUniqueResponse struct {
	DryRun bool         `json:"dryRun"`
	Mapped []UniqueSlot `json:"mapped"`
	// Left are the unmapped slots it could not decide.
	Left []UniqueSlot `json:"left"`
}

// MapUnique maps, for every standing consent, each unmapped slot whose
// owner's own devices advertise exactly one service for its kind (by
// presence, live or not; revoked devices are not asked): the slots of the
// reserved purpose, and of each purpose the site declares, for every kind
// of job. It is the upgrade's one command: consents made before mappings
// existed are unmapped, and with grants on their jobs are declined until a
// person chooses. A slot with no service, or more than one, is left for
// the person, and listed.
func (a *Admin) MapUnique(ctx context.Context, req MapUniqueRequest) (MapUniqueResponse, error) {
	if a.presence == nil {
		return MapUniqueResponse{}, noPresence
	}
	f, err := a.Export(ctx)
	if err != nil {
		return MapUniqueResponse{}, err
	}
	p, err := projection.New(f)
	if err != nil {
		return MapUniqueResponse{}, err
	}
	out := MapUniqueResponse{DryRun: req.DryRun, Mapped: []UniqueSlot{}, Left: []UniqueSlot{}}
	offered := map[string]map[string][]string{} // owner → kind → services
	for _, c := range f.Consents {
		if _, standing := p.ConsentFor(c.Owner, c.SiteID); !standing {
			continue
		}
		site, ok := p.SiteFor(c.SiteID)
		if !ok {
			continue
		}
		if offered[c.Owner] == nil {
			services, err := a.advertisedBy(ctx, f, []string{c.Owner}, 0)
			if err != nil {
				return MapUniqueResponse{}, err
			}
			offered[c.Owner] = map[string][]string{}
			for _, s := range services {
				if !slices.Contains(offered[c.Owner][s.Kind], s.Service) {
					offered[c.Owner][s.Kind] = append(offered[c.Owner][s.Kind], s.Service)
				}
			}
		}
		purposes := append([]string{projection.ReservedPurpose}, site.Purposes...)
		for _, purpose := range slices.Compact(purposes) {
			for _, kind := range protocol.JobKinds {
				if _, mapped := p.MappingFor(c.Owner, c.SiteID, purpose, kind); mapped {
					continue
				}
				slot := UniqueSlot{Owner: c.Owner, SiteID: c.SiteID, Purpose: purpose, Kind: kind}
				services := offered[c.Owner][kind]
				if len(services) != 1 {
					slot.Offered = services
					out.Left = append(out.Left, slot)
					continue
				}
				slot.Service = services[0]
				if !req.DryRun {
					if _, err := a.Map(ctx, MapRequest{Owner: c.Owner, SiteID: c.SiteID, Purpose: purpose, Kind: kind, Service: slot.Service}); err != nil {
						return out, err
					}
				}
				out.Mapped = append(out.Mapped, slot)
			}
		}
	}
	return out, nil
}
