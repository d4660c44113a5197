package protocol

// DaemonInfo is the `daemon` object of a pair start request.
type DaemonInfo struct {
	Version  string `json:"version"`
	Label    string `json:"label"`
	Platform string `json:"platform"`
}

// PairStartRequest begins a device-code pairing (action "start").
type PairStartRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	Action          string         `json:"action"`
	Daemon          DaemonInfo     `json:"daemon"`
	Device          PublicIdentity `json:"device"`
	Capabilities    []Capability   `json:"capabilities"`
}

// PairStartResponse is the relay's answer to a start: codes and where to
// approve them.
type PairStartResponse struct {
	DeviceCode      string `json:"deviceCode"`
	UserCode        string `json:"userCode"`
	VerificationURL string `json:"verificationUrl"`
	ExpiresAt       int64  `json:"expiresAt"`
	PollIntervalMs  int64  `json:"pollIntervalMs"`
}

// PairPollRequest asks whether a pairing was approved (action "poll").
type PairPollRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	Action          string `json:"action"`
	DeviceCode      string `json:"deviceCode"`
}

// PairPollResponse is discriminated by Status: "pending", "denied" and
// "expired" carry nothing else; "approved" carries the rest. Sites is a
// JS object whose key order is the projection's, so it is a Record; an
// approved answer with no sites needs a non-nil empty Record (`{}`), since
// nil means absent here.
type PairPollResponse struct {
	Status             string                 `json:"status"`
	RunnerID           string                 `json:"runnerId,omitempty"`
	Owner              string                 `json:"owner,omitempty"`
	OwnerLabel         *string                `json:"ownerLabel,omitempty"`
	Sites              Record[PublicIdentity] `json:"sites,omitzero"`
	ControlPlanePublic string                 `json:"controlPlanePublic,omitempty"`
}

// Pair poll statuses.
const (
	PairPending  = "pending"
	PairDenied   = "denied"
	PairExpired  = "expired"
	PairApproved = "approved"
)

// PairFixtureRequest is the reference relay's third pair shape, tried after
// start and poll fail: a pre-approved device pairing directly. Not part of
// the public protocol, but the reference serves it.
type PairFixtureRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	Owner           string         `json:"owner"`
	Device          PublicIdentity `json:"device"`
}

// PairFixtureResponse answers a PairFixtureRequest.
type PairFixtureResponse struct {
	ProtocolVersion    string                 `json:"protocolVersion"`
	RunnerID           string                 `json:"runnerId"`
	Sites              Record[PublicIdentity] `json:"sites"`
	ControlPlanePublic string                 `json:"controlPlanePublic,omitempty"`
}
