// Package projection is what the relay is told about the world: the control
// plane's decisions (sites and their keys, approved devices, consents with
// pause, rosters, revocations), as the reference's RelayFixture and
// Projection (@byollm/relay 0.1.1).
//
// The relay decides nothing about who may talk to whom; it routes according
// to this. The relay's own routing state is derived and disposable.
//
// This shape is a contract, not a test convenience: the control plane is
// written to produce whatever it says, so a field added carelessly here is a
// field the control plane must produce forever. Anything added must be a
// decision a control plane can know (not a fact only a daemon or a site
// holds), and a decision rather than something the relay can observe.
//
// There is deliberately no field where a private key could be put:
// RELAY_BLIND as a type, not as a promise.
package projection

import (
	"slices"
	"strconv"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Fixture is the reference's RelayFixture. Consents is required; the other
// lists default to empty when absent.
type Fixture struct {
	// Sites are the registered sites. A consent for a site absent here routes
	// nothing.
	Sites    []SiteRecord    `json:"sites" wire:"default"`
	Consents []ConsentRecord `json:"consents"`
	Devices  []DeviceRecord  `json:"devices" wire:"default"`
	Rosters  []RosterRecord  `json:"rosters" wire:"default"`
	// Revoked are routes that were revoked, as structured pairs: a separate
	// list rather than deleting the consent, because "the row is gone" and
	// "the row was revoked" are different answers to someone debugging why
	// routing stopped. Never a composite "owner:siteId" string, which is a
	// parser waiting to meet an id containing its separator.
	Revoked []RevocationRecord `json:"revoked" wire:"default"`
}

// SiteRecord is a site the control plane registered and domain-verified: the
// one authority for a site's public identity. The relay needs it to tell a
// daemon who to pin at pairing and to authenticate the site plane.
type SiteRecord struct {
	SiteID string                  `json:"siteId"`
	Site   protocol.PublicIdentity `json:"site"`
	// Succeeds traces the current key back to one a daemon holds, oldest
	// last (a daemon offline across two rotations must walk two links). The
	// relay distributes these and cannot mint one. Nil is absent.
	Succeeds []protocol.Succession `json:"succeeds,omitzero"`
	// RetiringUntil is when the retired key stops being allowed to sign work
	// (epoch ms); 0 is absent (a site that never rotated).
	RetiringUntil int64 `json:"retiringUntil,omitempty"`
	// Purposes are the purposes the site declares. None (nil or empty,
	// which encode alike) declares every purpose (a site with no manifest,
	// the reference's reading); an enqueue naming a purpose outside a
	// non-empty list is refused purpose-not-declared.
	Purposes []string `json:"purposes,omitempty"`
}

// ConsentRecord is a user's decision to let one site use their compute
// (CONSENT_BEFORE_ROUTE: with no record, nothing routes).
type ConsentRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
	// Paused: the consent stands and nothing routes under it. A third state
	// because dropping the consent reads as revoked to the daemon, which then
	// deletes its pairing; a user whose team changed a setting would be told
	// a human cut them off and have to re-pair after re-consenting.
	Paused bool `json:"paused" wire:"default"`
	// Mappings say, for each (purpose, kind), which service answers this
	// person's work for this site: at most one per (purpose, kind). They
	// live and die with the consent: withdrawing it deletes them, pausing
	// keeps them.
	Mappings []Mapping `json:"mappings,omitempty"`
}

// Mapping is one person's choice of the service that answers a (purpose,
// kind) of one site, the reference control plane's Mapping. Service is an
// id in ServiceOwner's namespace; "" ServiceOwner is the person's own. Two
// teammates can both run a "qwen": the mapping says whose.
type Mapping struct {
	Purpose      string `json:"purpose"`
	Kind         string `json:"kind"`
	Service      string `json:"service"`
	ServiceOwner string `json:"owner,omitempty"`
}

// RosterRecord is a named group whose members may use a shared machine. It
// never reaches a site (ROSTERS_NEVER_LEAK). The owner is not implicitly a
// member.
type RosterRecord struct {
	ID      string   `json:"id"`
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
}

// DeviceRecord is a device its owner approved. A device that is not here is
// refused: a device that presents keys nobody approved would make the relay
// the authority on identity.
type DeviceRecord struct {
	Owner    string                  `json:"owner"`
	RunnerID string                  `json:"runnerId"`
	Device   protocol.PublicIdentity `json:"device"`
	// Revoked is device-scoped. Absent must read as "not revoked": a
	// control plane that says nothing must not stop the fleet. Nil is absent.
	Revoked *bool `json:"revoked,omitempty"`
}

// RevocationRecord is a revoked route, named by its parts.
type RevocationRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
}

// Parse decodes a fixture as strictly as the reference's zod schema: unknown
// keys, nulls, wrong types and empty ids are refused, absent lists other
// than consents default to empty, and an absent paused is false.
func Parse(data []byte) (Fixture, error) {
	var f Fixture
	if err := protocol.DecodeStrict(data, &f); err != nil {
		return Fixture{}, err
	}
	return f.normalised(), nil
}

// normalised turns absent lists into empty ones, so a Fixture built in Go
// and one parsed from JSON encode the same.
func (f Fixture) normalised() Fixture {
	if f.Sites == nil {
		f.Sites = []SiteRecord{}
	}
	if f.Consents == nil {
		f.Consents = []ConsentRecord{}
	}
	if f.Devices == nil {
		f.Devices = []DeviceRecord{}
	}
	if f.Rosters == nil {
		f.Rosters = []RosterRecord{}
	}
	if f.Revoked == nil {
		f.Revoked = []RevocationRecord{}
	}
	return f
}

// Validate checks the value rules the shapes cannot express: the zod
// min(1) ids, the succession bound and a positive retiringUntil. A nil
// Consents in a Fixture built in Go is accepted as empty.
func (f Fixture) Validate() error {
	for i, s := range f.Sites {
		at := "sites[" + strconv.Itoa(i) + "]"
		if err := nonEmpty(at+".siteId", s.SiteID); err != nil {
			return err
		}
		if err := identity(at+".site", s.Site); err != nil {
			return err
		}
		if len(s.Succeeds) > protocol.MaxSuccessionChain {
			return &protocol.DecodeError{Path: at + ".succeeds", Problem: "must have at most " + strconv.Itoa(protocol.MaxSuccessionChain) + " items"}
		}
		for j, link := range s.Succeeds {
			if err := link.Validate(); err != nil {
				return prefixed(at+".succeeds["+strconv.Itoa(j)+"]", err)
			}
		}
		if s.RetiringUntil < 0 {
			return &protocol.DecodeError{Path: at + ".retiringUntil", Problem: "must be positive"}
		}
		if err := validPurposes(at+".purposes", s.Purposes); err != nil {
			return err
		}
	}
	for i, c := range f.Consents {
		at := "consents[" + strconv.Itoa(i) + "]"
		if err := firstError(nonEmpty(at+".owner", c.Owner), nonEmpty(at+".siteId", c.SiteID)); err != nil {
			return err
		}
		if err := validMappings(at+".mappings", c.Mappings); err != nil {
			return err
		}
	}
	for i, d := range f.Devices {
		at := "devices[" + strconv.Itoa(i) + "]"
		if err := firstError(nonEmpty(at+".owner", d.Owner), nonEmpty(at+".runnerId", d.RunnerID), identity(at+".device", d.Device)); err != nil {
			return err
		}
	}
	for i, r := range f.Rosters {
		at := "rosters[" + strconv.Itoa(i) + "]"
		if err := firstError(nonEmpty(at+".id", r.ID), nonEmpty(at+".owner", r.Owner)); err != nil {
			return err
		}
		for j, m := range r.Members {
			if err := nonEmpty(at+".members["+strconv.Itoa(j)+"]", m); err != nil {
				return err
			}
		}
	}
	for i, r := range f.Revoked {
		at := "revoked[" + strconv.Itoa(i) + "]"
		if err := firstError(nonEmpty(at+".owner", r.Owner), nonEmpty(at+".siteId", r.SiteID)); err != nil {
			return err
		}
	}
	return nil
}

// Bounds on the extension's lists: a consent's mappings and a site's
// declared purposes are read by every request that reads the record, so
// neither may grow without limit.
const (
	// MaxMappings bounds one consent's mappings.
	MaxMappings = 64
	// MaxPurposes bounds one site's declared purposes.
	MaxPurposes = 64
	// MaxNameBytes bounds a mapping's kind and service: ids a person picks
	// from what a device advertises, never prose.
	MaxNameBytes = 256
)

// validMappings holds a consent's mappings to the rules the shape cannot
// say: every field but owner present, each within its bound, at most
// MaxMappings, and one mapping per (purpose, kind), so "which service
// answers this slot" has exactly one answer.
func validMappings(path string, ms []Mapping) error {
	if len(ms) > MaxMappings {
		return &protocol.DecodeError{Path: path, Problem: "must have at most " + strconv.Itoa(MaxMappings) + " items"}
	}
	seen := map[[2]string]bool{}
	for j, m := range ms {
		at := path + "[" + strconv.Itoa(j) + "]"
		if err := firstError(
			nonEmpty(at+".purpose", m.Purpose), bounded(at+".purpose", m.Purpose, store.MaxPurposeBytes),
			nonEmpty(at+".kind", m.Kind), bounded(at+".kind", m.Kind, MaxNameBytes),
			nonEmpty(at+".service", m.Service), bounded(at+".service", m.Service, MaxNameBytes),
			bounded(at+".owner", m.ServiceOwner, store.MaxOwnerBytes),
		); err != nil {
			return err
		}
		slot := [2]string{m.Purpose, m.Kind}
		if seen[slot] {
			return &protocol.DecodeError{Path: at, Problem: "maps purpose " + strconv.Quote(m.Purpose) + " and kind " + strconv.Quote(m.Kind) + " a second time"}
		}
		seen[slot] = true
	}
	return nil
}

// validPurposes holds a site's declared purposes to non-empty, bounded and
// distinct.
func validPurposes(path string, ps []string) error {
	if len(ps) > MaxPurposes {
		return &protocol.DecodeError{Path: path, Problem: "must have at most " + strconv.Itoa(MaxPurposes) + " items"}
	}
	for j, p := range ps {
		at := path + "[" + strconv.Itoa(j) + "]"
		if err := firstError(nonEmpty(at, p), bounded(at, p, store.MaxPurposeBytes)); err != nil {
			return err
		}
		if slices.Contains(ps[:j], p) {
			return &protocol.DecodeError{Path: at, Problem: "declares " + strconv.Quote(p) + " a second time"}
		}
	}
	return nil
}

func bounded(path, s string, max int) error {
	if len(s) > max {
		return &protocol.DecodeError{Path: path, Problem: "must be at most " + strconv.Itoa(max) + " bytes"}
	}
	return nil
}

func nonEmpty(path, s string) error {
	if s == "" {
		return &protocol.DecodeError{Path: path, Problem: "must not be empty"}
	}
	return nil
}

func identity(path string, id protocol.PublicIdentity) error {
	if err := id.Validate(); err != nil {
		return prefixed(path, err)
	}
	return nil
}

func prefixed(path string, err error) error {
	if de, ok := err.(*protocol.DecodeError); ok {
		p := path
		if de.Path != "" {
			p = path + "." + de.Path
		}
		return &protocol.DecodeError{Path: p, Problem: de.Problem}
	}
	return err
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
