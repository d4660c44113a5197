package memory

import (
	"maps"
	"slices"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// Copies keep stored state private: a caller that edits a returned Job or
// Presence must not be editing the store, and under the race detector a
// shared pointer would be a data race the moment another goroutine writes.

func copyJob(j *store.Job) store.Job {
	out := *j
	if j.ClaimedBy != nil {
		holder := *j.ClaimedBy
		out.ClaimedBy = &holder
	}
	out.RefusedBy = slices.Clone(j.RefusedBy)
	if out.RefusedBy == nil {
		out.RefusedBy = []string{}
	}
	out.RetryAfter = maps.Clone(j.RetryAfter)
	if j.Payload != nil {
		payload := *j.Payload
		out.Payload = &payload
	}
	if j.Result != nil {
		result := *j.Result
		out.Result = &result
	}
	return out
}

func copyPresence(p *store.Presence) store.Presence {
	out := *p
	out.Capabilities = cloneCapabilities(p.Capabilities)
	out.Withheld = cloneWithheld(p.Withheld)
	return out
}

// cloneCapabilities copies a matrix; nil becomes empty, because an empty
// matrix is an answer (a paired machine with no healthy backend).
func cloneCapabilities(in []protocol.Capability) []protocol.Capability {
	out := make([]protocol.Capability, 0, len(in))
	for _, c := range in {
		c.KnownModels = slices.Clone(c.KnownModels)
		out = append(out, c)
	}
	return out
}

// cloneWithheld copies a withheld list; nil becomes empty.
func cloneWithheld(in []protocol.WithheldKind) []protocol.WithheldKind {
	out := make([]protocol.WithheldKind, 0, len(in))
	for _, w := range in {
		w.Claimants = slices.Clone(w.Claimants)
		out = append(out, w)
	}
	return out
}
