package controlplane

import (
	"strconv"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// The admin API's request and response bodies. Requests are decoded as
// strictly as the wire (unknown keys, nulls and missing fields refused), so
// a misspelt field is an error rather than a silently ignored one.

// RegisterSiteRequest is POST /admin/sites.
type RegisterSiteRequest struct {
	SiteID string                  `json:"siteId"`
	Site   protocol.PublicIdentity `json:"site"`
}

// RotateSiteRequest is POST /admin/sites/{siteId}/rotate: the site's new
// identity and the succession its current key signed over it.
type RotateSiteRequest struct {
	Site       protocol.PublicIdentity `json:"site"`
	Succession protocol.Succession     `json:"succession"`
}

// ApproveRequest is POST /admin/pairings/approve. RunnerID is optional; the
// control plane mints one when it is absent.
type ApproveRequest struct {
	UserCode string `json:"userCode"`
	Owner    string `json:"owner"`
	RunnerID string `json:"runnerId,omitempty"`
}

// DenyRequest is POST /admin/pairings/deny.
type DenyRequest struct {
	UserCode string `json:"userCode"`
}

// PendingPairingsResponse is GET /admin/pairings/pending.
type PendingPairingsResponse struct {
	// Pairings are the live pending pairings, newest first, at most
	// MaxListedPairings of them.
	Pairings []Pairing `json:"pairings"`
	// More says more are pending than are listed; a pairing not listed is
	// still found and decided by its code.
	More bool `json:"more,omitempty"`
	// Now is the control plane's clock (epoch ms), so a page can say how
	// long each code has left without trusting the browser's clock.
	Now int64 `json:"now"`
}

// ConsentRequest is POST /admin/consents (add) and
// /admin/consents/{pause,resume,revoke}.
type ConsentRequest struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
}

// RosterRequest is PUT /admin/rosters/{id}.
type RosterRequest struct {
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
}

// VersionResponse answers a change that has nothing else to report.
type VersionResponse struct {
	// Version stamps the change: the epoch ms at which it was written. Any
	// relay request that starts after the answer is decided with it in
	// force; the stamp is for logs and people, not an order to rely on.
	Version int64 `json:"version"`
}

// SiteResponse answers a site registration or rotation.
type SiteResponse struct {
	Version int64                 `json:"version"`
	Site    projection.SiteRecord `json:"site"`
}

// DeviceResponse answers an approval or a device revocation.
type DeviceResponse struct {
	Version  int64                   `json:"version"`
	Device   projection.DeviceRecord `json:"device"`
	Label    string                  `json:"label,omitempty"`
	Platform string                  `json:"platform,omitempty"`
}

// ConsentResponse answers a consent change.
type ConsentResponse struct {
	Version int64        `json:"version"`
	Consent ConsentState `json:"consent"`
}

// RosterResponse answers a roster change.
type RosterResponse struct {
	Version int64                   `json:"version"`
	Roster  projection.RosterRecord `json:"roster"`
}

// ErrorResponse is every refusal's body.
type ErrorResponse struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Validate implements protocol.Validator.
func (r RegisterSiteRequest) Validate() error {
	if r.SiteID == "" {
		return &protocol.DecodeError{Path: "siteId", Problem: "must not be empty"}
	}
	return prefixed("site", r.Site.Validate())
}

// Validate implements protocol.Validator.
func (r RotateSiteRequest) Validate() error {
	if err := prefixed("site", r.Site.Validate()); err != nil {
		return err
	}
	return prefixed("succession", r.Succession.Validate())
}

// Validate implements protocol.Validator.
func (r ApproveRequest) Validate() error {
	if r.UserCode == "" {
		return &protocol.DecodeError{Path: "userCode", Problem: "must not be empty"}
	}
	if r.Owner == "" {
		return &protocol.DecodeError{Path: "owner", Problem: "must not be empty"}
	}
	return nil
}

// Validate implements protocol.Validator.
func (r DenyRequest) Validate() error {
	if r.UserCode == "" {
		return &protocol.DecodeError{Path: "userCode", Problem: "must not be empty"}
	}
	return nil
}

// Validate implements protocol.Validator.
func (r ConsentRequest) Validate() error {
	if r.Owner == "" {
		return &protocol.DecodeError{Path: "owner", Problem: "must not be empty"}
	}
	if r.SiteID == "" {
		return &protocol.DecodeError{Path: "siteId", Problem: "must not be empty"}
	}
	return nil
}

// Validate implements protocol.Validator.
func (r RosterRequest) Validate() error {
	if r.Owner == "" {
		return &protocol.DecodeError{Path: "owner", Problem: "must not be empty"}
	}
	for i, m := range r.Members {
		if m == "" {
			return &protocol.DecodeError{Path: "members[" + strconv.Itoa(i) + "]", Problem: "must not be empty"}
		}
	}
	return nil
}

func prefixed(path string, err error) error {
	de, ok := err.(*protocol.DecodeError)
	if !ok {
		return err
	}
	if de.Path != "" {
		path += "." + de.Path
	}
	return &protocol.DecodeError{Path: path, Problem: de.Problem}
}
