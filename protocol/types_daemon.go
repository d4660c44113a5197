package protocol

// ClaimRequest asks for up to Max jobs.
type ClaimRequest struct {
	ProtocolVersion string       `json:"protocolVersion"`
	RunnerID        string       `json:"runnerId"`
	Capabilities    []Capability `json:"capabilities"`
	Max             int64        `json:"max"`
}

// ClaimResponse carries the claimed stubs; Jobs is never null on the wire.
type ClaimResponse struct {
	Jobs    []ClaimedStub `json:"jobs"`
	LeaseMs int64         `json:"leaseMs"`
}

// FetchRequest collects the sealed payload for a lease the daemon holds.
type FetchRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	RunnerID        string `json:"runnerId"`
	JobID           string `json:"jobId"`
	LeaseID         string `json:"leaseId"`
}

// FetchResponse is the payload sealed to the claiming device.
type FetchResponse struct {
	Envelope SealedEnvelope `json:"envelope"`
}

// HeartbeatRequest renews leases and reports capabilities. Withheld has a
// zod default of []: absent decodes as an empty slice.
type HeartbeatRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	RunnerID        string         `json:"runnerId"`
	DaemonVersion   string         `json:"daemonVersion"`
	Capabilities    []Capability   `json:"capabilities"`
	Withheld        []WithheldKind `json:"withheld" wire:"default"`
	ActiveLeases    []GrantRef     `json:"activeLeases"`
}

// SiteSuccession is one entry of HeartbeatResponse.Successions.
type SiteSuccession struct {
	Succeeds      []Succession `json:"succeeds"`
	RetiringUntil int64        `json:"retiringUntil,omitempty"`
}

// HeartbeatResponse, in the key order the reference relay writes it:
// sites, successions?, updateTo?, awaitingConsent, cancel, lost, serverTime.
// (The schema declares another order; the relay's object literal wins on
// the wire.) Successions is nil when no site has rotated: the reference
// leaves the key out rather than writing {}.
type HeartbeatResponse struct {
	Sites           Record[PublicIdentity] `json:"sites"`
	Successions     Record[SiteSuccession] `json:"successions,omitzero"`
	UpdateTo        string                 `json:"updateTo,omitempty"`
	AwaitingConsent []string               `json:"awaitingConsent"`
	Cancel          []GrantRef             `json:"cancel"`
	Lost            []GrantRef             `json:"lost"`
	ServerTime      int64                  `json:"serverTime"`
}

// ResultRequest submits a sealed outcome for a held lease.
type ResultRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	RunnerID        string         `json:"runnerId"`
	JobID           string         `json:"jobId"`
	LeaseID         string         `json:"leaseId"`
	Envelope        SealedEnvelope `json:"envelope"`
	Disposition     string         `json:"disposition"`
}

// ResultResponse: Duplicate is set (true) only for the device that already
// recorded this job's result.
type ResultResponse struct {
	Accepted  bool   `json:"accepted"`
	Duplicate *bool  `json:"duplicate,omitempty"`
	State     string `json:"state"`
}

// ReleaseRequest gives leases back, with a reason.
type ReleaseRequest struct {
	ProtocolVersion string     `json:"protocolVersion"`
	RunnerID        string     `json:"runnerId"`
	Leases          []GrantRef `json:"leases"`
	Reason          string     `json:"reason"`
}

// ReleaseResponse lists the job ids actually released.
type ReleaseResponse struct {
	Released []string `json:"released"`
}
