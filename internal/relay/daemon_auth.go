package relay

import (
	"errors"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// caller is a daemon whose signature verified: who it is according to
// presence (written at pairing, or rebuilt from the projection).
type caller struct {
	runnerID string
	owner    string
	device   protocol.PublicIdentity
}

// authDaemon is every authenticated daemon call: the signature header
// parsed (once for the request), the projection scoped to the runner it
// names, then verifyDaemon, then the store's bounds on what the body
// names. It returns who signed and what they asked; a non-nil *reply is
// the refusal to serve, an error a store failure.
func authDaemon[Req any, P decodable[Req]](r *Relay, c *call, q *request) (caller, Req, *reply, error) {
	var req Req
	r.readSignature(q, protocol.HeaderRunner)
	if err := r.scope(c, q, projection.Query{RunnerID: q.callerID()}); err != nil {
		return caller{}, req, nil, err
	}
	who, refusal, err := r.verifyDaemon(c, q, P(&req))
	if refusal == nil && err == nil {
		refusal = r.withinBounds(c, P(&req))
	}
	if refusal != nil || err != nil {
		return caller{}, req, refusal, err
	}
	return who, req, nil, nil
}

// verifyDaemon is signature first, then revocation, then the schema (the
// reference's DaemonPlane.#authed order). body is decoded into only when
// everything before it passed.
func (r *Relay) verifyDaemon(c *call, q *request, body protocol.Validator) (caller, *reply, error) {
	if q.sigErr != nil {
		return caller{}, &notSigned, nil
	}
	sig := q.sig
	// Named in the logs only once it is one that could be: a header of
	// kilobytes would otherwise be copied into every line of the request.
	if !plausibleRunnerID(sig.CallerID) {
		r.decide(c, "refuse-unknown-runner")
		return caller{}, &runnerUnknown, nil
	}
	c.runner = sig.CallerID

	known, rebuilt, refusal, err := r.presenceOf(c, q, sig.CallerID)
	if refusal != nil || err != nil {
		return caller{}, refusal, err
	}

	// Over the bytes as sent: the handshake refused every body that is not
	// its own text (a BOM, invalid UTF-8), so these are what the daemon
	// hashed, and the reference's text reading would hash the same bytes.
	if err := protocol.VerifyRequest(known.Device.Identity, c.endpoint, q.raw, sig, r.now()); err != nil {
		if errors.Is(err, protocol.ErrStale) {
			r.decide(c, "refuse-clock-skew")
			rep := clockSkew(r.now())
			return caller{}, &rep, nil
		}
		r.decide(c, "refuse-bad-signature")
		return caller{}, &badSignature, nil
	}

	// A rebuilt record is written only now (restorePresence).
	if rebuilt {
		if err := r.restorePresence(c, known); err != nil {
			return caller{}, nil, err
		}
	}

	// Asked of the projection on every call, never of a cached flag: a
	// daemon that simply never heartbeats must not go on claiming after its
	// device was revoked. Device-scoped: revoking one machine stops that
	// machine and not its owner's others. Every endpoint, heartbeat
	// included: the refusal is the message.
	if q.proj.RevokedDevice(known.RunnerID) {
		r.decide(c, "refuse-revoked")
		return caller{}, &runnerRevoked, nil
	}

	if err := q.body.Decode(body); err != nil {
		r.decide(c, "refuse-schema", slogError(err))
		return caller{}, &schemaFailed, nil
	}
	return caller{runnerID: known.RunnerID, owner: known.Owner, device: known.Device}, nil, nil
}

// presenceOf is who the runner is: its presence record, or, on a miss,
// the device the projection approved, rebuilt (restorePresence writes it
// once the signature verified). A non-nil *reply refuses a runner no
// human approved; an error is a store failure.
func (r *Relay) presenceOf(c *call, q *request, runnerID string) (known store.Presence, rebuilt bool, refusal *reply, err error) {
	// Presence is a cache, and a miss is not an answer about identity: a
	// store that lost its records (a restart, a TTL) must not tell every
	// daemon alive that it is unknown until a human re-pairs it. Who a
	// runner is lives in the projection, so a miss is repaired from there.
	known, found, err := r.store.Presence(c.ctx, runnerID)
	if err != nil {
		return store.Presence{}, false, nil, err
	}
	// The request's scope was read for this runner id, so it holds the
	// consents of the owner the projection gives the device. Presence names
	// the owner the caller is served as; when the two differ (the device was
	// re-approved to another owner since presence was written), that
	// owner's records are read as well, or its routes would be judged on
	// records nobody read.
	if approved, ok := q.proj.DeviceFor(runnerID); found && (!ok || approved.Owner != known.Owner) {
		p, err := r.cfg.Projection.Scoped(c.ctx, projection.Query{RunnerID: runnerID, Owner: known.Owner})
		if err != nil {
			return store.Presence{}, false, nil, err
		}
		q.proj = p
	}
	if found {
		return known, false, nil, nil
	}
	approved, ok := q.proj.DeviceFor(runnerID)
	if !ok {
		// No human ever approved this machine, and no amount of signing
		// changes that.
		r.decide(c, "refuse-unknown-runner")
		return store.Presence{}, false, &runnerUnknown, nil
	}
	return store.Presence{RunnerID: approved.RunnerID, Owner: approved.Owner, Device: approved.Device}, true, nil, nil
}

// restorePresence writes a rebuilt presence record. Written only once the
// signature verified, and the order is the safety argument: a record
// restored before the signature was checked would let anybody who knows
// a runner id repopulate presence for a machine whose keys they do not
// hold. Nothing has described itself yet, so the matrix and the withheld
// list are empty; the first heartbeat is the authority.
func (r *Relay) restorePresence(c *call, known store.Presence) error {
	if _, err := r.store.Seen(c.ctx, store.Sighting{
		RunnerID:     known.RunnerID,
		Owner:        known.Owner,
		Device:       known.Device,
		Capabilities: []protocol.Capability{},
		Withheld:     []protocol.WithheldKind{},
	}); err != nil {
		return err
	}
	r.decide(c, "rebuild-presence")
	return nil
}
