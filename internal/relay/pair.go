package relay

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// pollIntervalMs: fast enough that approving feels immediate, slow enough
// that a forgotten terminal is not a load generator.
const pollIntervalMs = 2_000

var (
	pairSchemaFailed   = fail(http.StatusBadRequest, protocol.CodeBadRequest, "pair request failed schema validation")
	identityIncoherent = fail(http.StatusBadRequest, protocol.CodeBadRequest, "the device identity is not consistent")
	// 501 with bad-request, as the reference answers: said plainly rather
	// than as a schema error, because the daemon's user deserves to know
	// this relay cannot do it.
	deviceCodeUnsupported = fail(http.StatusNotImplemented, protocol.CodeBadRequest, "this relay does not offer device-code pairing")
	pairingBusy           = fail(http.StatusTooManyRequests, protocol.CodeRateLimited, store.PairingBusyMessage)
	pairingThrottled      = fail(http.StatusTooManyRequests, protocol.CodeRateLimited, "too many pairings have been started from here — try again in a minute")
	noConsent             = fail(http.StatusForbidden, protocol.CodeForbidden, "no consent record for this user")
	deviceNotApproved     = fail(http.StatusForbidden, protocol.CodeForbidden, "this device has not been approved by its owner")
	deviceOtherOwner      = fail(http.StatusForbidden, protocol.CodeForbidden, "this device belongs to another owner")
)

// pair is unauthenticated: a machine with no pairing has no credential.
// Three shapes are tried in the reference's order: device-code start, poll,
// then the fixture exchange of a device already approved, on the body
// the request parsed once.
func (r *Relay) pair(c *call, q *request) (reply, error) {
	body := q.body
	var start protocol.PairStartRequest
	if body.Decode(&start) == nil {
		return r.pairStart(c, start)
	}
	var poll protocol.PairPollRequest
	if body.Decode(&poll) == nil {
		return r.pairPoll(c, poll)
	}
	var fixture protocol.PairFixtureRequest
	if err := body.Decode(&fixture); err != nil {
		r.decide(c, "refuse-schema", slogError(err))
		return pairSchemaFailed, nil
	}
	return r.pairFixture(c, fixture)
}

// The pairing throttle (token buckets in the store, so every replica drains
// the same ones). Anybody can start a pairing, and the ceiling of
// store.MaxOutstandingPairings live codes is the reference's rule; without
// a throttle one source fills it in a second and shuts pairing for
// everybody for ten minutes. Per caller's address (callerAddress, an IPv6
// one by its /64): a burst of 20 (an office behind one NAT pairing its
// machines), then one every 30 s, so one source holds at most 40 of the
// 500 codes at any instant. Per key: a burst of 5,
// then one a minute; a restarted pairing replaces its own code, so this
// only stops one machine spinning. Polls are not throttled here: a poll
// writes nothing and fills nothing, and API Gateway's route throttle
// bounds what a poll flood costs (template.yaml).
const (
	pairSourceBurst    = 20
	pairSourceRefillMs = 30_000
	pairKeyBurst       = 5
	pairKeyRefillMs    = 60_000
)

// pairStartAllowed takes a token from the caller's bucket, then the key's;
// a caller already throttled does not spend the key's.
func (r *Relay) pairStartAllowed(c *call, device protocol.PublicIdentity) (bool, error) {
	if c.caller != "" {
		ok, err := r.cfg.Pairing.TakeToken(c.ctx, "pair-source:"+sourceBucket(c.caller), pairSourceBurst, pairSourceRefillMs)
		if err != nil || !ok {
			return false, err
		}
	}
	// The identity key was checked against its signature already, so it is
	// a real key and its id is short.
	keyID, err := protocol.KeyID(device.Identity)
	if err != nil {
		return false, err
	}
	return r.cfg.Pairing.TakeToken(c.ctx, "pair-key:"+keyID, pairKeyBurst, pairKeyRefillMs)
}

// sourceBucket names the per-source bucket of an address. An IPv6 caller
// is counted by its /64: that is the smallest block a network hands one
// subscriber, who can take any address in it, so counting single IPv6
// addresses would give one machine 2^64 buckets (and the edge forwards IPv6
// viewers). An IPv4 address is itself. Text that is no address (no front
// end sends one) is its own bucket, as it always was.
func sourceBucket(address string) string {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return address
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr.WithZone(""), 64).Masked().String()
}

// pairStart mints a code and remembers the keys it stands for. Nothing is
// decided here: approval is a human in the control plane.
func (r *Relay) pairStart(c *call, req protocol.PairStartRequest) (reply, error) {
	if r.cfg.Pairing == nil || r.cfg.VerificationURL == "" {
		r.decide(c, "refuse-device-code-unsupported")
		return deviceCodeUnsupported, nil
	}
	if !protocol.VerifyPublicIdentity(req.Device) {
		r.decide(c, "refuse-identity-incoherent")
		return identityIncoherent, nil
	}
	if rep := boundedDescription(req.Capabilities, nil); rep != nil {
		r.decide(c, "refuse-too-long")
		return *rep, nil
	}
	allowed, err := r.pairStartAllowed(c, req.Device)
	if err != nil {
		return reply{}, err
	}
	if !allowed {
		// Who was throttled, for an operator looking for a flood: the
		// caller's address and, behind the edge, the egress address it
		// came through. Logged on this refusal only.
		r.decide(c, "refuse-pairing-throttled", slog.String("caller", c.caller), slog.String("sourceIP", c.sourceIP))
		return pairingThrottled, nil
	}
	pending := store.PendingPairing{
		DeviceCode:    protocol.NewDeviceCode(),
		UserCode:      protocol.NewUserCode(),
		Device:        req.Device,
		Capabilities:  req.Capabilities,
		Label:         req.Daemon.Label,
		Platform:      req.Daemon.Platform,
		DaemonVersion: shownVersion(req.Daemon.Version),
		ExpiresAt:     r.now() + store.PairingCodeTTLMs,
	}
	put, err := r.cfg.Pairing.PutPairing(c.ctx, pending)
	if err != nil {
		return reply{}, err
	}
	if put == store.PutAtCapacity {
		// rate-limited: nothing this caller did was wrong, but the
		// instruction (back off, try again) is the one that code carries.
		r.decide(c, "refuse-pairing-at-capacity")
		return pairingBusy, nil
	}
	r.decide(c, "pairing-started", slog.Int64("expiresAt", pending.ExpiresAt))
	return ok(protocol.PairStartResponse{
		DeviceCode:      pending.DeviceCode,
		UserCode:        pending.UserCode,
		VerificationURL: r.cfg.VerificationURL,
		ExpiresAt:       pending.ExpiresAt,
		PollIntervalMs:  pollIntervalMs,
	}), nil
}

// pairPoll asks the projection, never a flag set here, whether a human
// approved this keypair.
func (r *Relay) pairPoll(c *call, req protocol.PairPollRequest) (reply, error) {
	if r.cfg.Pairing == nil {
		r.decide(c, "refuse-device-code-unsupported")
		return deviceCodeUnsupported, nil
	}
	if rep := bounded(field{"deviceCode", req.DeviceCode, store.MaxDeviceCodeBytes}); rep != nil {
		r.decide(c, "refuse-too-long")
		return *rep, nil
	}
	pending, found, err := r.cfg.Pairing.PairingByDeviceCode(c.ctx, req.DeviceCode)
	if err != nil {
		return reply{}, err
	}
	// Expired and never-existed answer alike: a poll loop does not need to
	// tell them apart, and telling them apart would let somebody test codes
	// for existence.
	if !found {
		r.decide(c, "pairing-expired")
		return ok(protocol.PairPollResponse{Status: protocol.PairExpired}), nil
	}
	p, err := r.cfg.Projection.Scoped(c.ctx, projection.Query{DeviceIdentity: pending.Device.Identity})
	if err != nil {
		return reply{}, err
	}
	approved, ok2 := p.DeviceByIdentity(pending.Device.Identity)
	if !ok2 {
		r.decide(c, "pairing-pending")
		return ok(protocol.PairPollResponse{Status: protocol.PairPending}), nil
	}
	c.runner = approved.RunnerID
	// Approved with nothing consented is still approved: refusing would
	// fail a new account's first pairing for a reason it cannot act on from
	// a terminal.
	sites, err := siteKeys(p.SitesFor(approved.Owner))
	if err != nil {
		return reply{}, err
	}
	// What the machine said it could run when it asked to pair, so presence
	// has an answer the moment the device appears; the next heartbeat
	// replaces it.
	if _, err := r.store.Seen(c.ctx, store.Sighting{
		RunnerID:     approved.RunnerID,
		Owner:        approved.Owner,
		Device:       pending.Device,
		Capabilities: nonNilCapabilities(pending.Capabilities),
		Withheld:     []protocol.WithheldKind{},
	}); err != nil {
		return reply{}, err
	}
	// Single use: leaving it would be a second way to ask the same question.
	if err := r.cfg.Pairing.DropPairing(c.ctx, pending.DeviceCode); err != nil {
		return reply{}, err
	}
	r.decide(c, "pairing-approved", slog.Int("sites", len(sites)))
	return ok(protocol.PairPollResponse{
		Status:             protocol.PairApproved,
		RunnerID:           approved.RunnerID,
		Owner:              approved.Owner,
		Sites:              sites,
		ControlPlanePublic: r.cfg.ControlPlanePublic,
	}), nil
}

// pairFixture pairs a device a human already approved. The answer carries
// the sites' keys, never a relay key: the daemon pins the party that will
// seal its work, which is what makes relayed work unforgeable.
func (r *Relay) pairFixture(c *call, req protocol.PairFixtureRequest) (reply, error) {
	if !protocol.VerifyPublicIdentity(req.Device) {
		r.decide(c, "refuse-identity-incoherent")
		return identityIncoherent, nil
	}
	p, err := r.cfg.Projection.Scoped(c.ctx, projection.Query{Owner: req.Owner, DeviceIdentity: req.Device.Identity})
	if err != nil {
		return reply{}, err
	}
	// CONSENT_BEFORE_ROUTE: consent is a click somewhere else, and there is
	// no discovery path here that creates one.
	pinned := p.SitesFor(req.Owner)
	if len(pinned) == 0 {
		r.decide(c, "refuse-no-consent")
		return noConsent, nil
	}
	// Matched on the identity key a human compared a fingerprint of, not on
	// an id the device claims: otherwise the relay would be the authority
	// on who a machine is.
	approved, found := p.DeviceByIdentity(req.Device.Identity)
	if !found {
		r.decide(c, "refuse-device-not-approved")
		return deviceNotApproved, nil
	}
	c.runner = approved.RunnerID
	if approved.Owner != req.Owner {
		// An approval is for a person, not a key in general.
		r.decide(c, "refuse-device-other-owner")
		return deviceOtherOwner, nil
	}
	sites, err := siteKeys(pinned)
	if err != nil {
		return reply{}, err
	}
	// The fixture exchange carries no matrix; the first heartbeat does.
	if _, err := r.store.Seen(c.ctx, store.Sighting{
		RunnerID:     approved.RunnerID,
		Owner:        req.Owner,
		Device:       req.Device,
		Capabilities: []protocol.Capability{},
		Withheld:     []protocol.WithheldKind{},
	}); err != nil {
		return reply{}, err
	}
	r.decide(c, "paired", slog.Int("sites", len(sites)))
	return ok(protocol.PairFixtureResponse{
		ProtocolVersion:    protocol.ProtocolVersion,
		RunnerID:           approved.RunnerID,
		Sites:              sites,
		ControlPlanePublic: r.cfg.ControlPlanePublic,
	}), nil
}

// siteKeys is the pin set as the wire carries it: each site's identity by
// its key id, in the projection's (sorted) order. Never nil, so an empty
// set is written as {}.
func siteKeys(sites []projection.SiteRecord) (protocol.Record[protocol.PublicIdentity], error) {
	out := protocol.Record[protocol.PublicIdentity]{}
	for _, s := range sites {
		id, err := protocol.KeyID(s.Site.Identity)
		if err != nil {
			return nil, err
		}
		out.Set(id, s.Site)
	}
	return out, nil
}

func nonNilCapabilities(caps []protocol.Capability) []protocol.Capability {
	if caps == nil {
		return []protocol.Capability{}
	}
	return caps
}

// maxShownVersionBytes bounds the daemon version a pending pairing keeps
// to show the operator. The protocol puts no bound on it, and it decides
// nothing, so an absurd one is cut rather than refused: it must not make
// the stored pairing too large to store.
const maxShownVersionBytes = 64

func shownVersion(v string) string {
	if len(v) <= maxShownVersionBytes {
		return v
	}
	return strings.ToValidUTF8(v[:maxShownVersionBytes], "") + "…"
}
