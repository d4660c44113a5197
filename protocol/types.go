package protocol

// Wire shapes shared by both planes. Type names are the TypeScript schema
// names of @byollm/protocol 0.1.1; field order is the order the reference
// emits, because encoding walks fields in declaration order and a relay must
// answer byte for byte.
//
// Optional fields: strings carry `omitempty` (every optional string in the
// schemas is min(1), so "" can never be a present value); positive ints
// carry `omitempty` for the same reason; fields whose zero value is a legal
// present value (bools, nonnegative ints, possibly-empty arrays) are
// pointers or use `omitzero` on a slice, where nil means absent.

// PublicIdentity is a party's public keys as they travel.
type PublicIdentity struct {
	Identity      string `json:"identity"`
	Encryption    string `json:"encryption"`
	EncryptionSig string `json:"encryptionSig"`
}

// JobStub is the routing shape of a job: what a relay may see.
// Purpose is min(1) when present, so "" means absent.
type JobStub struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	Owner      string `json:"owner"`
	Site       string `json:"site"`
	Audience   string `json:"audience"`
	Purpose    string `json:"purpose,omitempty"`
	SizeClass  string `json:"sizeClass"`
	Streaming  bool   `json:"streaming"`
	DeadlineAt int64  `json:"deadlineAt"`
}

// Lease is the right to work on a job until ExpiresAt (epoch ms).
type Lease struct {
	ID        string `json:"id"`
	RunnerID  string `json:"runnerId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// ClaimedStub is a JobStub plus the lease that holds it and, on a relayed
// route with a control plane, the grant. The reference builds it as
// `{...stub, lease}` then `{...job, grant}`, so the stub's keys come first.
type ClaimedStub struct {
	ID         string       `json:"id"`
	Kind       string       `json:"kind"`
	Owner      string       `json:"owner"`
	Site       string       `json:"site"`
	Audience   string       `json:"audience"`
	Purpose    string       `json:"purpose,omitempty"`
	SizeClass  string       `json:"sizeClass"`
	Streaming  bool         `json:"streaming"`
	DeadlineAt int64        `json:"deadlineAt"`
	Lease      Lease        `json:"lease"`
	Grant      *SignedGrant `json:"grant,omitempty"`
}

// Stub returns the JobStub part of a claimed stub.
func (c ClaimedStub) Stub() JobStub {
	return JobStub{
		ID: c.ID, Kind: c.Kind, Owner: c.Owner, Site: c.Site, Audience: c.Audience,
		Purpose: c.Purpose, SizeClass: c.SizeClass, Streaming: c.Streaming, DeadlineAt: c.DeadlineAt,
	}
}

// Claimed joins a stub and its lease in the reference's key order.
func Claimed(s JobStub, lease Lease, grant *SignedGrant) ClaimedStub {
	return ClaimedStub{
		ID: s.ID, Kind: s.Kind, Owner: s.Owner, Site: s.Site, Audience: s.Audience,
		Purpose: s.Purpose, SizeClass: s.SizeClass, Streaming: s.Streaming, DeadlineAt: s.DeadlineAt,
		Lease: lease, Grant: grant,
	}
}

// SignedGrant is a control plane's signed permission for one job.
type SignedGrant struct {
	GrantID   string `json:"grantId"`
	JobID     string `json:"jobId"`
	Site      string `json:"site"`
	User      string `json:"user"`
	Owner     string `json:"owner"`
	Purpose   string `json:"purpose"`
	Kind      string `json:"kind"`
	Service   string `json:"service"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

// SealedEnvelope is an opaque sealed payload or result.
type SealedEnvelope struct {
	Ciphertext     string `json:"ciphertext"`
	RecipientKeyID string `json:"recipientKeyId"`
	SenderKeyID    string `json:"senderKeyId"`
	Direction      string `json:"direction"`
	DeadlineAt     int64  `json:"deadlineAt"`
}

// Succession is one link of a site's key rotation chain.
type Succession struct {
	Identity  PublicIdentity `json:"identity"`
	Signature string         `json:"signature"`
}

// Capability is one row of a daemon's capability matrix. KnownModels: nil
// is absent, an empty non-nil slice is a present `[]` (legal).
type Capability struct {
	Kind         string   `json:"kind"`
	Service      string   `json:"service"`
	BackendID    string   `json:"backendId"`
	BackendClass string   `json:"backendClass"`
	Model        string   `json:"model"`
	KnownModels  []string `json:"knownModels,omitzero"`
	OfferScope   string   `json:"offerScope"`
}

// WithheldKind is a kind a device deliberately does not advertise because
// two or more services claim it.
type WithheldKind struct {
	Kind      string     `json:"kind"`
	Claimants []Claimant `json:"claimants"`
}

// Claimant is one service claiming a withheld kind.
type Claimant struct {
	Service string `json:"service"`
	Offer   string `json:"offer"`
}

// GrantRef names one grant by both halves: job id and lease id.
type GrantRef struct {
	JobID   string `json:"jobId"`
	LeaseID string `json:"leaseId"`
}
