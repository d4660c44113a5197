package siteserver

import (
	"errors"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// userCodeAttempts bounds how many fresh user codes a start tries before
// giving up: with 27^8 codes a second collision among live pairings means
// something is wrong, not unlucky.
const userCodeAttempts = 4

// pair is unauthenticated: a machine with no pairing has no credential.
func (s *Server) pair(d daemonCall) (reply, error) {
	var start protocol.PairStartRequest
	if d.body.Decode(&start) == nil {
		return s.pairStart(d, start)
	}
	var poll protocol.PairPollRequest
	if d.body.Decode(&poll) == nil {
		return s.pairPoll(d, poll)
	}
	return fail(protocol.CodeBadRequest, "pair request failed schema validation"), nil
}

// pairStart mints the codes and remembers the machine. The device must
// prove its encryption key belongs to the identity it presents before
// either is stored, or a caller could pair a real identity with an
// encryption key whose secret it holds and read everything sealed to it.
func (s *Server) pairStart(d daemonCall, req protocol.PairStartRequest) (reply, error) {
	if !protocol.VerifyPublicIdentity(req.Device) {
		return fail(protocol.CodeBadRequest, "the device's encryption key is not signed by the identity it was presented with"), nil
	}
	now, err := s.store.Now(d.ctx)
	if err != nil {
		return reply{}, err
	}
	deviceCode := protocol.NewDeviceCode()
	p := sitestore.Pairing{
		DeviceCodeHash: sitestore.HashDeviceCode(deviceCode),
		State:          sitestore.PairingPending,
		Label:          req.Daemon.Label,
		Platform:       req.Daemon.Platform,
		DaemonVersion:  req.Daemon.Version,
		Capabilities:   req.Capabilities,
		Device:         req.Device,
		ExpiresAt:      now + s.pairingTTLMs,
		CreatedAt:      now,
	}
	for attempt := 0; ; attempt++ {
		p.UserCode = sitestore.NewUserCode()
		err = s.store.CreatePairing(d.ctx, p)
		if !errors.Is(err, sitestore.ErrUserCodeTaken) || attempt+1 == userCodeAttempts {
			break
		}
	}
	if err != nil {
		return reply{}, err
	}
	return ok(protocol.PairStartResponse{
		DeviceCode:      deviceCode,
		UserCode:        p.UserCode,
		VerificationURL: s.verificationURL,
		ExpiresAt:       p.ExpiresAt,
		PollIntervalMs:  s.pollIntervalMs,
	}), nil
}

// pairPoll answers by the hash of the device code. Expiry is judged before
// approval, so a late approval cannot revive a code; an approved pairing is
// delivered exactly once, and the sites (this one) only then: a pending or
// denied poll learns nothing.
func (s *Server) pairPoll(d daemonCall, req protocol.PairPollRequest) (reply, error) {
	hash := sitestore.HashDeviceCode(req.DeviceCode)
	p, found, err := s.store.PairingByDeviceCodeHash(d.ctx, hash)
	if err != nil {
		return reply{}, err
	}
	if !found {
		return fail(protocol.CodeNotFound, "unknown device code"), nil
	}
	now, err := s.store.Now(d.ctx)
	if err != nil {
		return reply{}, err
	}
	switch {
	case p.State == sitestore.PairingDenied:
		return ok(protocol.PairPollResponse{Status: protocol.PairDenied}), nil
	case p.State == sitestore.PairingPending && p.ExpiresAt <= now:
		return ok(protocol.PairPollResponse{Status: protocol.PairExpired}), nil
	case p.State == sitestore.PairingApproved:
		// Collected by a conditional write, not a read followed by one: of
		// two polls racing with the same code, one gets the answer.
		collected, err := s.store.CollectPairing(d.ctx, hash)
		if err != nil {
			return reply{}, err
		}
		if !collected {
			return fail(protocol.CodeNotFound, "this pairing has already been collected"), nil
		}
		return ok(protocol.PairPollResponse{
			Status:   protocol.PairApproved,
			RunnerID: p.RunnerID,
			Owner:    p.Owner,
			// A direct site is one site, in the same shape a hub answers
			// with; and no controlPlanePublic: the daemon runs direct.
			Sites: s.sites(),
		}), nil
	}
	return ok(protocol.PairPollResponse{Status: protocol.PairPending}), nil
}

// sites is the pin set: this site alone, by its key id.
func (s *Server) sites() protocol.Record[protocol.PublicIdentity] {
	out := protocol.Record[protocol.PublicIdentity]{}
	out.Set(s.siteKeyID, s.site)
	return out
}
