package grants

import (
	"slices"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
)

// widens is which offer scopes reach somebody other than the owner: an
// allowlist, as the reference's WIDENS. A filter written against the
// excluded case fails open the moment the excluded value is renamed (it
// happened: self became private), so a scope not listed here stays narrow.
var widens = map[string]bool{
	protocol.AudiencePrivate: false,
	protocol.AudienceTeam:    true,
}

// resolveService picks the service the grant names, from what the device
// advertised in this claim: the one service that serves the job's kind to
// the job's owner. It returns a decline reason instead when there is none
// or more than one (see the package doc for why neither is guessed).
func resolveService(in relay.GrantRequest) (service, reason string) {
	own := in.Job.Owner == in.Owner
	var eligible []string
	for _, c := range in.Capabilities {
		if c.Kind != in.Job.Kind {
			continue
		}
		// The owner's own work is exempt structurally, not by scope:
		// private is a statement about other people, and consulting it
		// here would let the narrowest setting stop somebody's own machine
		// from serving them.
		if !own && !widens[c.OfferScope] {
			continue
		}
		if !slices.Contains(eligible, c.Service) {
			eligible = append(eligible, c.Service)
		}
	}
	switch len(eligible) {
	case 0:
		return "", ReasonResolvedElsewhere
	case 1:
		return eligible[0], ""
	default:
		return "", ReasonAmbiguousService
	}
}
