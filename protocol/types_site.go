package protocol

// Site-plane bodies of the reference relay. These are
// the relay's own schemas, not @byollm/protocol's.

// EnqueueRequest offers a job stub for routing.
type EnqueueRequest struct {
	ProtocolVersion string  `json:"protocolVersion"`
	SiteID          string  `json:"siteId"`
	Stub            JobStub `json:"stub"`
}

// PayloadRequest hands over the payload sealed to the claiming device.
type PayloadRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	SiteID          string         `json:"siteId"`
	JobID           string         `json:"jobId"`
	Envelope        SealedEnvelope `json:"envelope"`
}

// CancelRequest asks the relay to cancel a job.
type CancelRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	SiteID          string `json:"siteId"`
	JobID           string `json:"jobId"`
}

// QueryRequest is what the relay validates for the GET reads (pending,
// results): the site id from the query string.
type QueryRequest struct {
	SiteID string `json:"siteId"`
}

// JobStateResponse answers enqueue and payload: `{jobId, state}`.
type JobStateResponse struct {
	JobID string `json:"jobId"`
	State string `json:"state"`
}

// CancelResponse answers cancel.
type CancelResponse struct {
	Cancelled bool `json:"cancelled"`
}

// SitePendingJob is one job awaiting its payload. The claim fields are
// absent (JS undefined) when the job is not claimed.
type SitePendingJob struct {
	JobID          string          `json:"jobId"`
	Device         *PublicIdentity `json:"device,omitempty"`
	RunnerID       string          `json:"runnerId,omitempty"`
	LeaseID        string          `json:"leaseId,omitempty"`
	AwaitingUntil  int64           `json:"awaitingUntil,omitempty"`
	LeaseExpiresAt int64           `json:"leaseExpiresAt,omitempty"`
}

// SitePendingResponse answers GET pending.
type SitePendingResponse struct {
	Jobs []SitePendingJob `json:"jobs"`
}

// SiteResult is one finished job as the site collects it.
type SiteResult struct {
	JobID       string          `json:"jobId"`
	Envelope    *SealedEnvelope `json:"envelope,omitempty"`
	Disposition string          `json:"disposition,omitempty"`
	RunnerID    string          `json:"runnerId,omitempty"`
	LeaseID     string          `json:"leaseId,omitempty"`
	Device      *PublicIdentity `json:"device,omitempty"`
	RunnerOwner string          `json:"runnerOwner,omitempty"`
}

// SiteResultsResponse answers GET results.
type SiteResultsResponse struct {
	Jobs []SiteResult `json:"jobs"`
}
