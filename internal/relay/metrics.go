package relay

import "github.com/byorelay/byorelay/store"

// Metrics counts what the relay decided, for dashboards and alarms (the
// deployment plugs CloudWatch EMF in here). Every method must be cheap and
// must not block: it is called on the request path.
type Metrics interface {
	// Claimed is one claim request that granted jobs jobs (0 included: an
	// empty claim is the normal answer of an idle queue).
	Claimed(jobs int)
	// Granted is one authorGrant answer that signed a grant.
	Granted()
	// Declined is one that declined: its reason (a short, bounded word the
	// author chose) and whether it was final for the device.
	Declined(reason string, permanent bool)
	// Refused is one refusal served: the endpoint and the wire error code.
	Refused(endpoint, code string)
	// Conflict is one operation that lost to another replica (a store that
	// sees a transaction conflict reports it through the relay's hook).
	Conflict(operation string)
	// Swept is one sweep that requeued and removed jobs.
	Swept(requeued, removed int)
	// Churn is one (site, owner) pair reported for unsealed churn.
	Churn(c store.UnsealedChurn)
}

// NopMetrics counts nothing.
type NopMetrics struct{}

func (NopMetrics) Claimed(int)               {}
func (NopMetrics) Granted()                  {}
func (NopMetrics) Declined(string, bool)     {}
func (NopMetrics) Refused(string, string)    {}
func (NopMetrics) Conflict(string)           {}
func (NopMetrics) Swept(int, int)            {}
func (NopMetrics) Churn(store.UnsealedChurn) {}
