package grants

import (
	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/protocol"
)

// Decline reasons, in the reference control plane's words. Each is
// permanent or not by its own rule (permanent below).
const (
	// ReasonNotConsented: the job's owner has no standing consent for the
	// site (never given, or revoked). Permanent.
	ReasonNotConsented = "not-consented"
	// ReasonConsentPaused: the consent stands and is paused. Transient: a
	// pause is its owner's to lift, and the job must still be waiting when
	// they do.
	ReasonConsentPaused = "consent-paused"
	// ReasonNotAMember: the job's owner may not use the device owner's
	// machines. Permanent.
	ReasonNotAMember = "not-a-member"
	// ReasonUnmapped: the person consented and left this (purpose, kind)
	// without a service. Transient: they may map it a minute from now.
	ReasonUnmapped = "unmapped"
	// ReasonResolvedElsewhere: the mapping names a service on another
	// owner's machine, or one this device does not offer for the kind to
	// this person. Transient: an owner narrowing an offer for a minute must
	// not unpick the job from this device for good.
	ReasonResolvedElsewhere = "resolved-elsewhere"
	// ReasonStoreUnavailable: there was no policy read to check against.
	// Transient: a failed read says nothing about the job.
	ReasonStoreUnavailable = "store-unavailable"
)

// permanent is whether a decline for reason is final for this device: only
// the two facts a queued job cannot outlive, consent withdrawn and a person
// removed from a team. A permanent mark on anything its owner can change,
// or on a fault of ours, would outlive its cause.
func permanent(reason string) bool {
	return reason == ReasonNotConsented || reason == ReasonNotAMember
}

func decline(reason string) *grant.Decline {
	return &grant.Decline{Reason: reason, Permanent: permanent(reason)}
}

// widens is which offer scopes reach somebody other than the owner: an
// allowlist, as the reference's WIDENS. A filter written against the
// excluded case fails open the moment the excluded value is renamed (it
// happened: self became private), so a scope not listed here stays narrow.
var widens = map[string]bool{
	protocol.AudiencePrivate: false,
	protocol.AudienceTeam:    true,
}

// admission is what the law admits a job onto: the purpose and the
// service the grant names.
type admission struct {
	purpose string
	service string
}

// admit is the grant law: whether this device may run this job, and on
// which service. The steps run in the reference's order, which is whose
// fact each is (the person's consent, their membership, their mapping, then
// this machine's ability to honour it); the first that fails is the reason,
// so the reason names the first thing actually wrong.
//
// It reads in.Projection, the read the claim routed by: the route filter
// and this check are two code paths over one snapshot. The filter is an
// optimisation; this is the authority, because a grant is the device's only
// evidence of consent and membership, and a routing bug must not become a
// validly signed admission.
func admit(in grant.Request) (admission, *grant.Decline) {
	p := in.Projection
	if p == nil {
		return admission{}, decline(ReasonStoreUnavailable)
	}
	job, owner := in.Job, in.Owner
	purpose := in.Purpose
	if purpose == "" {
		purpose = ReservedPurpose
	}

	// Consent is the job owner's, for this site. Revoked and never given
	// read alike; a pause keeps the consent (and its mappings) and stops
	// the work.
	consent, consented := p.ConsentFor(job.Owner, in.SiteID)
	if !consented {
		return admission{}, decline(ReasonNotConsented)
	}
	if consent.Paused {
		return admission{}, decline(ReasonConsentPaused)
	}

	// A device always runs its own owner's work: membership is asked only
	// about other people, so no roster can stop somebody's own machine.
	if job.Owner != owner && !p.MayRunFor(owner, job.Owner) {
		return admission{}, decline(ReasonNotAMember)
	}

	mapping, mapped := p.MappingFor(job.Owner, in.SiteID, purpose, job.Kind)
	if !mapped {
		return admission{}, decline(ReasonUnmapped)
	}

	// Whose machine before which service: a service id means something
	// only in its owner's namespace, so a mapping naming a teammate's qwen
	// is not satisfied by another teammate's qwen, nor by the mapper's own.
	serviceOwner := mapping.ServiceOwner
	if serviceOwner == "" {
		serviceOwner = job.Owner
	}
	if serviceOwner != owner {
		return admission{}, decline(ReasonResolvedElsewhere)
	}

	// Offered to this person, not merely present on the machine. The
	// owner's own work is exempt structurally rather than by scope:
	// private is a statement about other people.
	own := job.Owner == owner
	for _, c := range in.Capabilities {
		if c.Kind == job.Kind && c.Service == mapping.Service && (own || widens[c.OfferScope]) {
			return admission{purpose: purpose, service: mapping.Service}, nil
		}
	}
	return admission{}, decline(ReasonResolvedElsewhere)
}
