package siteserver

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var (
	notSigned     = fail(protocol.CodeUnauthorized, "this request is not signed")
	unknownRunner = fail(protocol.CodeUnauthorized, "this runner is not recognised")
	// One message for a stale and a forged signature: telling a caller
	// whether their clock or their key is wrong tells a forger which half
	// already works.
	badSignature  = fail(protocol.CodeUnauthorized, "this request's signature is not valid")
	revoked       = fail(protocol.CodeRevoked, "this runner has been revoked by its owner")
	schemaFailed  = fail(protocol.CodeBadRequest, "request body failed schema validation")
	wrongRunnerID = fail(protocol.CodeUnauthorized, "runner id does not match the signing key")
)

// authed is the preamble of the four signed endpoints, in the reference's
// order: signature (against the identity pinned at approval, never one the
// request carries), then revocation, then the schema (so a stranger probing
// an endpoint learns nothing of the wire format), then the body's runner id
// against the signer. now is the store clock, read once, so the signature
// window moves with the conformance kit's advanceTime like every other
// deadline.
func (s *Server) authed(d daemonCall, body protocol.Validator, runnerID func() string) (sitestore.Runner, int64, *reply, error) {
	sig, err := protocol.SignatureFromHeaders(d.header, protocol.HeaderRunner)
	if err != nil {
		return sitestore.Runner{}, 0, &notSigned, nil
	}
	runner, found, err := s.store.Runner(d.ctx, sig.CallerID)
	if err != nil {
		return sitestore.Runner{}, 0, nil, err
	}
	if !found {
		return sitestore.Runner{}, 0, &unknownRunner, nil
	}
	now, err := s.store.Now(d.ctx)
	if err != nil {
		return sitestore.Runner{}, 0, nil, err
	}
	if protocol.VerifyRequest(runner.Device.Identity, d.endpoint, d.raw, sig, now) != nil {
		return sitestore.Runner{}, 0, &badSignature, nil
	}
	if runner.RevokedAt != 0 {
		return sitestore.Runner{}, 0, &revoked, nil
	}
	if d.body.Decode(body) != nil {
		return sitestore.Runner{}, 0, &schemaFailed, nil
	}
	if runnerID() != runner.ID {
		return sitestore.Runner{}, 0, &wrongRunnerID, nil
	}
	return runner, now, nil, nil
}
