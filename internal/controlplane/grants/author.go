package grants

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// ReservedPurpose is the purpose of a stub that names none. The daemon
// compares a grant's purpose against the stub's purpose or this, so a grant
// for a purpose-less stub must carry it; a mapping for such a stub is
// stored under it.
const ReservedPurpose = projection.ReservedPurpose

// Author signs grants with a control-plane key. Safe for concurrent use.
type Author struct {
	signer Signer
	clock  clock.Clock
	newID  func() (string, error)
}

// Options are what a caller may inject instead of the defaults.
type Options struct {
	// Clock stamps issuedAt; nil is the host clock. The daemon refuses a
	// grant more than 30 s ahead of its own clock or 120 s behind it.
	Clock clock.Clock
	// NewGrantID mints grant ids; nil is "grant_" and a random UUID, the
	// reference's format. For tests that assert what was signed.
	NewGrantID func() (string, error)
}

// New builds an Author that signs with a 32-byte Ed25519 seed held in
// memory (SeedSigner).
func New(seed []byte, opts Options) (*Author, error) {
	signer, err := NewSeedSigner(seed)
	if err != nil {
		return nil, err
	}
	return NewWithSigner(signer, opts), nil
}

// NewWithSigner builds an Author that signs through signer: a SeedSigner,
// or a KMSSigner, which holds no key in this process at all.
func NewWithSigner(signer Signer, opts Options) *Author {
	a := &Author{signer: signer, clock: opts.Clock, newID: opts.NewGrantID}
	if a.clock == nil {
		a.clock = clock.System{}
	}
	if a.newID == nil {
		a.newID = newGrantID
	}
	return a
}

// Public is the control-plane public key, for relay.Config's
// ControlPlanePublic: from the same object that signs, so a deployment
// cannot hand devices one key and sign with another (every job would be
// refused at the device while every process reports itself healthy).
func (a *Author) Public() string { return a.signer.Public() }

// Grant is a grant.Author: pass a.Grant as relay.Config's AuthorGrant.
// It signs what the grant law (admit) admits and declines the rest with the
// law's reason. An error (no randomness for the id, a signer that cannot
// sign) fails the claim, as a throw does in the reference; a decline is an
// answer, not an error.
func (a *Author) Grant(ctx context.Context, in grant.Request) (grant.Decision, error) {
	admitted, declined := admit(in)
	if declined != nil {
		return grant.Decision{Declined: declined}, nil
	}
	id, err := a.newID()
	if err != nil {
		return grant.Decision{}, fmt.Errorf("grants: grant id: %w", err)
	}
	g, err := a.sign(ctx, protocol.SignedGrant{
		GrantID: id,
		JobID:   in.Job.ID,
		// The key id the device pinned, carried off the stub: the daemon
		// compares it with the stub's site, and job ids are only unique per
		// site.
		Site: in.SiteKey,
		// Whose work: the stub's owner. The daemon refuses a grant whose
		// user differs from the stub's.
		User: in.Job.Owner,
		// Whose machine: the device's owner, as the relay authenticated it.
		Owner:    in.Owner,
		Purpose:  admitted.purpose,
		Kind:     in.Job.Kind,
		Service:  admitted.service,
		IssuedAt: a.clock.Now().UnixMilli(),
	})
	if err != nil {
		return grant.Decision{}, err
	}
	return grant.Decision{Granted: &g}, nil
}

// newGrantID is the reference's `grant_${randomUUID()}`: a version 4 UUID
// from crypto/rand.
func newGrantID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("grant_%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
