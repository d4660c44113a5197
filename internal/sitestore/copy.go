package sitestore

import "slices"

// CopyJob is a deep copy: a store never hands out a value that aliases
// what it keeps.
func CopyJob(j Job) Job {
	j.AudienceAllow = cloneNil(j.AudienceAllow)
	j.DependsOn = slices.Clone(j.DependsOn)
	j.RefusedBy = slices.Clone(j.RefusedBy)
	j.SealedTo = slices.Clone(j.SealedTo)
	if j.Lease != nil {
		l := *j.Lease
		j.Lease = &l
	}
	if j.StreamGrant != nil {
		g := *j.StreamGrant
		j.StreamGrant = &g
	}
	if j.Outcome != nil {
		o := *j.Outcome
		j.Outcome = &o
	}
	if j.Answer != nil {
		a := *j.Answer
		j.Answer = &a
	}
	if j.Provenance != nil {
		p := *j.Provenance
		j.Provenance = &p
	}
	return j
}

// CopyRunner is a deep copy.
func CopyRunner(r Runner) Runner {
	r.Capabilities = slices.Clone(r.Capabilities)
	return r
}

// CopyPairing is a deep copy.
func CopyPairing(p Pairing) Pairing {
	p.Capabilities = slices.Clone(p.Capabilities)
	return p
}

// cloneNil keeps nil as nil: an unset roster is not an empty one.
func cloneNil(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}
