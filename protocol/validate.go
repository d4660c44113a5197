package protocol

import (
	"net/url"
	"strconv"
)

// Value rules of each wire shape, following its zod schema in
// @byollm/protocol 0.1.1 (or @byollm/relay 0.1.1 for the site plane). Only
// what zod checks is checked: a relay stricter than the reference refuses
// bodies a conforming daemon sends. Shape rules (types, unknown keys, null,
// required keys) are DecodeStrict's.

// Validate implements Validator.
func (p PublicIdentity) Validate() error {
	var c check
	c.str("identity", p.Identity, 0)
	c.str("encryption", p.Encryption, 0)
	c.str("encryptionSig", p.EncryptionSig, 0)
	return c.err
}

// Validate implements Validator.
func (s JobStub) Validate() error {
	var c check
	c.str("id", s.ID, 0)
	c.enum("kind", s.Kind, JobKinds)
	c.str("owner", s.Owner, 0)
	c.str("site", s.Site, 0)
	c.enum("audience", s.Audience, Audiences)
	c.optStr("purpose", s.Purpose)
	c.enum("sizeClass", s.SizeClass, SizeClasses)
	c.positive("deadlineAt", s.DeadlineAt)
	return c.err
}

// Validate implements Validator.
func (l Lease) Validate() error {
	var c check
	c.str("id", l.ID, 0)
	c.str("runnerId", l.RunnerID, 0)
	c.positive("expiresAt", l.ExpiresAt)
	return c.err
}

// Validate implements Validator.
func (s ClaimedStub) Validate() error {
	var c check
	c.sub("", s.Stub().Validate())
	c.sub("lease", s.Lease.Validate())
	if s.Grant != nil {
		c.sub("grant", s.Grant.Validate())
	}
	return c.err
}

// Validate implements Validator.
func (g SignedGrant) Validate() error {
	var c check
	c.str("grantId", g.GrantID, 0)
	c.str("jobId", g.JobID, 0)
	c.str("site", g.Site, 0)
	c.str("user", g.User, 0)
	c.str("owner", g.Owner, 0)
	c.str("purpose", g.Purpose, 0)
	c.str("kind", g.Kind, 0)
	c.str("service", g.Service, 0)
	c.positive("issuedAt", g.IssuedAt)
	c.str("signature", g.Signature, 0)
	return c.err
}

// Validate implements Validator.
func (e SealedEnvelope) Validate() error {
	var c check
	c.str("ciphertext", e.Ciphertext, 0)
	c.str("recipientKeyId", e.RecipientKeyID, 0)
	c.str("senderKeyId", e.SenderKeyID, 0)
	c.enum("direction", e.Direction, EnvelopeDirections)
	c.positive("deadlineAt", e.DeadlineAt)
	return c.err
}

// Validate implements Validator.
func (s Succession) Validate() error {
	var c check
	c.sub("identity", s.Identity.Validate())
	c.str("signature", s.Signature, 0)
	return c.err
}

// Validate implements Validator.
func (k Capability) Validate() error {
	var c check
	c.enum("kind", k.Kind, JobKinds)
	c.str("service", k.Service, 0)
	c.enum("backendId", k.BackendID, BackendIDs)
	c.enum("backendClass", k.BackendClass, BackendClasses)
	c.str("model", k.Model, 0)
	for i, m := range k.KnownModels {
		c.str(index("knownModels", i), m, 0)
	}
	c.enum("offerScope", k.OfferScope, OfferScopes)
	return c.err
}

// Validate implements Validator.
func (w WithheldKind) Validate() error {
	var c check
	c.enum("kind", w.Kind, JobKinds)
	// Fewer than two claimants is not a conflict, and a "withheld" kind
	// with one claimant would tell an owner to choose between one thing.
	if len(w.Claimants) < 2 {
		c.fail("claimants", "must have at least 2 items")
	}
	for i, cl := range w.Claimants {
		c.str(index("claimants", i)+".service", cl.Service, 0)
		c.enum(index("claimants", i)+".offer", cl.Offer, OfferScopes)
	}
	return c.err
}

// Validate implements Validator.
func (g GrantRef) Validate() error {
	var c check
	c.str("jobId", g.JobID, 0)
	c.str("leaseId", g.LeaseID, 0)
	return c.err
}

func (c *check) capabilities(path string, caps []Capability) {
	for i, k := range caps {
		c.sub(index(path, i), k.Validate())
	}
}

func (c *check) grantRefs(path string, refs []GrantRef) {
	for i, r := range refs {
		c.sub(index(path, i), r.Validate())
	}
}

func (c *check) version(v string) {
	c.literal("protocolVersion", v, ProtocolVersion)
}

// Validate implements Validator.
func (r PairStartRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.literal("action", r.Action, "start")
	c.str("daemon.version", r.Daemon.Version, 0)
	c.str("daemon.label", r.Daemon.Label, MaxLabelLength)
	c.enum("daemon.platform", r.Daemon.Platform, Platforms)
	c.sub("device", r.Device.Validate())
	c.capabilities("capabilities", r.Capabilities)
	return c.err
}

// Validate implements Validator. verificationUrl is checked as an absolute
// URL with a scheme, an approximation of zod's z.url() (WHATWG parsing).
func (r PairStartResponse) Validate() error {
	var c check
	c.strMin("deviceCode", r.DeviceCode, 20, 0)
	c.strMin("userCode", r.UserCode, 4, 16)
	if u, err := url.Parse(r.VerificationURL); err != nil || u.Scheme == "" {
		c.fail("verificationUrl", "must be a URL")
	}
	c.positive("expiresAt", r.ExpiresAt)
	c.between("pollIntervalMs", r.PollIntervalMs, 500, 60_000)
	return c.err
}

// Validate implements Validator.
func (r PairPollRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.literal("action", r.Action, "poll")
	c.strMin("deviceCode", r.DeviceCode, 20, 0)
	return c.err
}

// Validate implements Validator: the discriminated union by status.
func (r PairPollResponse) Validate() error {
	var c check
	switch r.Status {
	case PairPending, PairDenied, PairExpired:
		// Each of these arms is .strict() with only `status`.
		if r.RunnerID != "" || r.Owner != "" || r.OwnerLabel != nil || r.Sites != nil || r.ControlPlanePublic != "" {
			c.fail("", "a "+strconv.Quote(r.Status)+" answer carries only status")
		}
	case PairApproved:
		c.str("runnerId", r.RunnerID, 0)
		c.str("owner", r.Owner, 0)
		if r.Sites == nil {
			c.fail("sites", "is required")
		}
		c.identities("sites", r.Sites)
		c.optStr("controlPlanePublic", r.ControlPlanePublic)
	default:
		c.enum("status", r.Status, []string{PairPending, PairDenied, PairExpired, PairApproved})
	}
	return c.err
}

func (c *check) identities(path string, sites Record[PublicIdentity]) {
	for _, e := range sites {
		if e.Key == "" {
			c.fail(path, "keys must not be empty")
		}
		c.sub(joinKey(path, e.Key), e.Value.Validate())
	}
}

// Validate implements Validator.
func (r PairFixtureRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("owner", r.Owner, 0)
	c.sub("device", r.Device.Validate())
	return c.err
}

// Validate implements Validator.
func (r PairFixtureResponse) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.identities("sites", r.Sites)
	c.optStr("controlPlanePublic", r.ControlPlanePublic)
	return c.err
}

// Validate implements Validator.
func (r ClaimRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.capabilities("capabilities", r.Capabilities)
	c.between("max", r.Max, 1, MaxClaim)
	return c.err
}

// Validate implements Validator.
func (r ClaimResponse) Validate() error {
	var c check
	for i, j := range r.Jobs {
		c.sub(index("jobs", i), j.Validate())
	}
	c.positive("leaseMs", r.LeaseMs)
	return c.err
}

// Validate implements Validator.
func (r FetchRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.str("jobId", r.JobID, 0)
	c.str("leaseId", r.LeaseID, 0)
	return c.err
}

// Validate implements Validator.
func (r FetchResponse) Validate() error {
	var c check
	c.sub("envelope", r.Envelope.Validate())
	return c.err
}

// Validate implements Validator. An absent withheld is zod's default([]);
// it decodes as nil and encodes as [].
func (r HeartbeatRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.str("daemonVersion", r.DaemonVersion, 0)
	c.capabilities("capabilities", r.Capabilities)
	for i, w := range r.Withheld {
		c.sub(index("withheld", i), w.Validate())
	}
	c.grantRefs("activeLeases", r.ActiveLeases)
	return c.err
}

// Validate implements Validator.
func (s SiteSuccession) Validate() error {
	var c check
	if len(s.Succeeds) > MaxSuccessionChain {
		c.fail("succeeds", "must have at most "+strconv.Itoa(MaxSuccessionChain)+" items")
	}
	for i, l := range s.Succeeds {
		c.sub(index("succeeds", i), l.Validate())
	}
	if s.RetiringUntil != 0 {
		c.positive("retiringUntil", s.RetiringUntil)
	}
	return c.err
}

// Validate implements Validator.
func (r HeartbeatResponse) Validate() error {
	var c check
	c.identities("sites", r.Sites)
	for _, e := range r.Successions {
		if e.Key == "" {
			c.fail("successions", "keys must not be empty")
		}
		c.sub(joinKey("successions", e.Key), e.Value.Validate())
	}
	c.grantRefs("cancel", r.Cancel)
	c.grantRefs("lost", r.Lost)
	c.positive("serverTime", r.ServerTime)
	for i, s := range r.AwaitingConsent {
		c.str(index("awaitingConsent", i), s, 0)
	}
	c.optStr("updateTo", r.UpdateTo)
	return c.err
}

// Validate implements Validator.
func (r ResultRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.str("jobId", r.JobID, 0)
	c.str("leaseId", r.LeaseID, 0)
	c.sub("envelope", r.Envelope.Validate())
	c.enum("disposition", r.Disposition, ResultDispositions)
	return c.err
}

// Validate implements Validator.
func (r ResultResponse) Validate() error {
	var c check
	c.str("state", r.State, 0)
	return c.err
}

// Validate implements Validator.
func (r ReleaseRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("runnerId", r.RunnerID, 0)
	c.grantRefs("leases", r.Leases)
	c.enum("reason", r.Reason, ReleaseReasons)
	return c.err
}

// Validate implements Validator.
func (r ReleaseResponse) Validate() error {
	var c check
	for i, s := range r.Released {
		c.str(index("released", i), s, 0)
	}
	return c.err
}

// Validate implements Validator, including WireError's superRefine: each
// code-specific extra appears exactly on its own code.
func (e WireError) Validate() error {
	var c check
	c.enum("error", e.Error, WireErrorCodes)
	c.str("message", e.Message, 0)
	for i, s := range e.Supported {
		c.str(index("supported", i), s, 0)
	}
	c.optStr("minimum", e.Minimum)
	c.optStr("floor", e.Floor)
	if e.RetryAfter != nil {
		c.nonNegative("retryAfter", *e.RetryAfter)
	}
	if e.ServerTime != 0 {
		c.positive("serverTime", e.ServerTime)
	}
	if e.MaxSkewMs != 0 {
		c.positive("maxSkewMs", e.MaxSkewMs)
	}
	skew := e.Error == CodeClockSkew
	carried := e.ServerTime != 0 || e.MaxSkewMs != 0
	if skew && !carried {
		c.fail("", "clock-skew must carry serverTime and maxSkewMs")
	}
	if !skew && carried {
		c.fail("", e.Error+" must not carry serverTime or maxSkewMs")
	}
	floored := e.Error == CodeDaemonBelowFloor
	if floored && e.Floor == "" {
		c.fail("", "daemon-below-floor must carry floor")
	}
	if !floored && e.Floor != "" {
		c.fail("", e.Error+" must not carry floor")
	}
	versioned := e.Error == CodeUnsupportedProtocolVersion
	versionFields := e.Supported != nil || e.Minimum != ""
	if versioned && !versionFields {
		c.fail("", "unsupported-protocol-version must carry supported and minimum")
	}
	if !versioned && versionFields {
		c.fail("", e.Error+" must not carry supported or minimum")
	}
	return c.err
}

// Validate implements Validator.
func (r EnqueueRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("siteId", r.SiteID, 0)
	c.sub("stub", r.Stub.Validate())
	return c.err
}

// Validate implements Validator.
func (r PayloadRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("siteId", r.SiteID, 0)
	c.str("jobId", r.JobID, 0)
	c.sub("envelope", r.Envelope.Validate())
	return c.err
}

// Validate implements Validator.
func (r CancelRequest) Validate() error {
	var c check
	c.version(r.ProtocolVersion)
	c.str("siteId", r.SiteID, 0)
	c.str("jobId", r.JobID, 0)
	return c.err
}

// Validate implements Validator.
func (r QueryRequest) Validate() error {
	var c check
	c.str("siteId", r.SiteID, 0)
	return c.err
}

// Site-plane answers have no schema in the reference; these check only
// what a site reading them relies on.

// Validate implements Validator.
func (r JobStateResponse) Validate() error {
	var c check
	c.str("jobId", r.JobID, 0)
	c.str("state", r.State, 0)
	return c.err
}

// Validate implements Validator.
func (r CancelResponse) Validate() error { return nil }

// Validate implements Validator.
func (r SitePendingResponse) Validate() error {
	var c check
	for i, j := range r.Jobs {
		c.str(index("jobs", i)+".jobId", j.JobID, 0)
	}
	return c.err
}

// Validate implements Validator.
func (r SiteResultsResponse) Validate() error {
	var c check
	for i, j := range r.Jobs {
		c.str(index("jobs", i)+".jobId", j.JobID, 0)
		if j.Envelope != nil {
			c.sub(index("jobs", i)+".envelope", j.Envelope.Validate())
		}
	}
	return c.err
}
