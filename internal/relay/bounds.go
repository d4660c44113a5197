package relay

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Bounds on what a caller names (store.Max*), checked after a request is
// authenticated and decoded and before the first store call, so an
// identifier too long for a table key is a 400 that names the field rather
// than a store error and a 500. An intended difference from the
// reference, which holds everything in memory and accepts any length; no
// real peer comes near them (docs/decisions/0006-bounds-on-identifiers.md).
//
// Checked here, once for every endpoint (withinBounds, from each plane's
// auth), not in the protocol types' Validate: the bounds are this relay's
// store's, not the protocol's, and their refusal names the field and the
// bound, where a Validate failure is the reference's schema refusal.

// withinBounds is the refusal for a decoded request that names something
// over its bound, or nil; a request within them has its job named in the
// logs from here on.
func (r *Relay) withinBounds(c *call, req protocol.Validator) *reply {
	job, refusal := bounds(req)
	if refusal != nil {
		r.decide(c, "refuse-too-long")
		return refusal
	}
	if job != "" {
		c.job = job
	}
	return nil
}

// bounds is each request type's bounded fields, and the job it names.
func bounds(req protocol.Validator) (job string, refusal *reply) {
	switch req := req.(type) {
	case *protocol.EnqueueRequest:
		// Before the satisfiable question too: it is a read keyed on the
		// owner.
		return req.Stub.ID, bounded(
			field{"stub.id", req.Stub.ID, store.MaxJobIDBytes},
			field{"stub.owner", req.Stub.Owner, store.MaxOwnerBytes},
			field{"stub.purpose", req.Stub.Purpose, store.MaxPurposeBytes},
		)
	case *protocol.PayloadRequest:
		return req.JobID, bounded(field{"jobId", req.JobID, store.MaxJobIDBytes})
	case *protocol.CancelRequest:
		return req.JobID, bounded(field{"jobId", req.JobID, store.MaxJobIDBytes})
	case *protocol.FetchRequest:
		return req.JobID, boundedHolder(req.JobID, req.LeaseID)
	case *protocol.ResultRequest:
		return req.JobID, boundedHolder(req.JobID, req.LeaseID)
	case *seal.AppendFrameRequest:
		return req.JobID, boundedHolder(req.JobID, req.LeaseID)
	case *seal.AttachRequest:
		return req.JobID, bounded(field{"jobId", req.JobID, store.MaxJobIDBytes})
	case *protocol.ReleaseRequest:
		return "", boundedRefs("leases", req.Leases)
	case *protocol.HeartbeatRequest:
		if rep := boundedRefs("activeLeases", req.ActiveLeases); rep != nil {
			return "", rep
		}
		return "", boundedDescription(req.Capabilities, req.Withheld)
	}
	// The rest name nothing a store keys on beyond what auth checked: a
	// claim's runnerId must be the signer's, and a site's reads name only
	// the signer.
	return "", nil
}

// boundedHolder checks a job id and the lease a holder names it by.
func boundedHolder(jobID, leaseID string) *reply {
	return bounded(field{"jobId", jobID, store.MaxJobIDBytes}, field{"leaseId", leaseID, store.MaxLeaseIDBytes})
}

// field is one identifier and its bound.
type field struct {
	name  string
	value string
	max   int
}

// tooLong refuses a value over its bound, naming both, because the sender
// (a site developer, nearly always) can act on that and on nothing vaguer.
func tooLong(name string, max int) reply {
	return fail(http.StatusBadRequest, protocol.CodeBadRequest,
		name+" is longer than this relay accepts (at most "+strconv.Itoa(max)+" bytes)")
}

// bounded returns the refusal for the first field over its bound, or nil.
func bounded(fields ...field) *reply {
	for _, f := range fields {
		if len(f.value) > f.max {
			rep := tooLong(f.name, f.max)
			return &rep
		}
	}
	return nil
}

// boundedRefs checks a list of grant references: its length, then each id.
func boundedRefs(name string, refs []protocol.GrantRef) *reply {
	if len(refs) > store.MaxLeaseRefs {
		rep := fail(http.StatusBadRequest, protocol.CodeBadRequest,
			name+" has more entries than this relay accepts (at most "+strconv.Itoa(store.MaxLeaseRefs)+")")
		return &rep
	}
	for _, ref := range refs {
		if rep := bounded(
			field{name + "[].jobId", ref.JobID, store.MaxJobIDBytes},
			field{name + "[].leaseId", ref.LeaseID, store.MaxLeaseIDBytes},
		); rep != nil {
			return rep
		}
	}
	return nil
}

// boundedDescription checks what a device says about itself against what
// a store item can hold, measured as the store writes it (JSON).
func boundedDescription(caps []protocol.Capability, withheld []protocol.WithheldKind) *reply {
	c, _ := json.Marshal(caps)
	w, _ := json.Marshal(withheld)
	if len(c)+len(w) > store.MaxCapabilityBytes {
		rep := tooLong("capabilities", store.MaxCapabilityBytes)
		return &rep
	}
	return nil
}

// plausibleRunnerID says whether a runner id from the signature header can
// name a runner at all: a runner id is approved by a person and minted
// short, and one that is too long for a key or not UTF-8 (DynamoDB stores
// only UTF-8) cannot be one. Refused as unknown, before presence is read,
// which is what the reference answers for it too.
func plausibleRunnerID(id string) bool {
	return len(id) <= store.MaxRunnerIDBytes && utf8.ValidString(id)
}
