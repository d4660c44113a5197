package siteserver

import (
	"fmt"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// The envelope of a stored job: sealed by the site to itself at enqueue
// (so the store holds ciphertext only) with deadline createdAt + 24 h, and
// resealed to the claiming device at fetch with the same deadline, read
// from the record rather than recomputed, because the signature binds it.

func (s *Server) sealAtRest(jobID, plaintext string, createdAt int64) (protocol.SealedEnvelope, error) {
	return protocol.Seal(plaintext, s.keys, s.site.Encryption, protocol.EnvelopeContext{
		JobID:          jobID,
		SenderKeyID:    s.siteKeyID,
		RecipientKeyID: s.siteKeyID,
		DeadlineAt:     createdAt + protocol.EnvelopeMaxAgeMs,
		Direction:      protocol.DirectionPayload,
	})
}

func (s *Server) openAtRest(j sitestore.Job) (string, error) {
	return protocol.Open(j.Envelope, s.keys, s.site.Identity, protocol.ExpectedEnvelope{
		JobID:          j.ID,
		SenderKeyID:    s.siteKeyID,
		RecipientKeyID: s.siteKeyID,
		Direction:      protocol.DirectionPayload,
	})
}

func (s *Server) resealForDevice(j sitestore.Job, device protocol.PublicIdentity) (protocol.SealedEnvelope, error) {
	plaintext, err := s.openAtRest(j)
	if err != nil {
		return protocol.SealedEnvelope{}, err
	}
	deviceKeyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return protocol.SealedEnvelope{}, err
	}
	return protocol.Seal(plaintext, s.keys, device.Encryption, protocol.EnvelopeContext{
		JobID:          j.ID,
		SenderKeyID:    s.siteKeyID,
		RecipientKeyID: deviceKeyID,
		DeadlineAt:     j.CreatedAt + protocol.EnvelopeMaxAgeMs,
		Direction:      protocol.DirectionPayload,
	})
}

// mustKeyID is the key id of an identity the store pinned at approval,
// after the start request proved it coherent; "" (which matches no
// envelope) if it somehow is not.
func mustKeyID(identity string) string {
	id, err := protocol.KeyID(identity)
	if err != nil {
		return ""
	}
	return id
}

func errNoLease(jobID string) error {
	return fmt.Errorf("siteserver: store returned job %s from claim with no lease", jobID)
}
