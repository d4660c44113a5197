package relay

import (
	"net/http"

	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// refusals is the one place a store refusal becomes a wire answer (the
// reference's REFUSALS table). The store says why in its own
// vocabulary and this decides what a caller is told, so a store that grows a
// reason does not get to invent a status code.
//
// not-ready is the one that matters: claimed but not yet sealed, and a
// daemon must retry rather than abandon. terminal is also a 409 and
// deliberately a different code: not-ready means keep asking and too-late
// means stop; a daemon that read them as one would poll a finished job
// until its lease ran out. not-holder and stale-lease are forbidden, not
// unauthorized: both are an identified caller being refused, and a 401 would
// send the daemon to re-pair a device whose keys are fine.
var refusals = map[store.Refusal]reply{
	store.RefusedNotFound:   fail(http.StatusNotFound, protocol.CodeNotFound, "unknown job"),
	store.RefusedNotHolder:  fail(http.StatusForbidden, protocol.CodeForbidden, "this runner does not hold the job"),
	store.RefusedStaleLease: fail(http.StatusForbidden, protocol.CodeForbidden, "that lease is no longer current"),
	store.RefusedNotReady:   fail(http.StatusConflict, protocol.CodeNotReady, "the site has not sealed this job yet"),
	store.RefusedTerminal:   fail(http.StatusConflict, protocol.CodeTooLate, "this job has already finished"),
}

// refusalReply maps a store refusal. was is the job's state for
// RefusedTooLate (a site's late seal), "" when the job is gone. A refusal
// outside the table is a store answering something no caller expects from
// it: a bug on our side, so a 500.
func refusalReply(refused store.Refusal, was store.State) reply {
	if refused == store.RefusedTooLate {
		state := string(was)
		if state == "" {
			state = "gone"
		}
		return fail(http.StatusConflict, protocol.CodeTooLate, "job is "+state+", not awaiting payload")
	}
	if rep, ok := refusals[refused]; ok {
		return rep
	}
	return serverError
}

// tooLargeBody refuses a request body over MaxBodyBytes before it is
// parsed.
func tooLargeBody(n int) reply {
	return fail(http.StatusBadRequest, protocol.CodeBadRequest,
		protocol.TooLargeMessage(int64(n), protocol.MaxEnvelopeBytes)+" Every plan has the same ceiling.")
}

// handshakeRefusal serves protocol.Handshake's refusal, a bad-request for
// a body that is not one JSON object or an unsupported-protocol-version,
// with the status the wire's table gives its code (400 for both).
func handshakeRefusal(refusal protocol.WireError) reply {
	return reply{status: protocol.StatusOf(refusal.Error), code: refusal.Error, body: refusal}
}

// clockSkew is the refusal for a signature outside the freshness window,
// with the relay's time so the far side can say how far off it is. Its own
// code because it is the one refusal a retry never fixes and setting the
// clock always does; reported as a bad signature it sends the caller to
// look at its keys.
func clockSkew(now int64) reply {
	return reply{status: http.StatusUnauthorized, code: protocol.CodeClockSkew, body: protocol.ClockSkewError(now)}
}

// tooLarge refuses an envelope over the relay's ceiling, before anything is
// held: the same ceiling and the same refusal in both directions, or a
// device could still fill the relay the site cannot.
func tooLarge(err *protocol.EnvelopeTooLargeError) reply {
	return fail(http.StatusBadRequest, protocol.CodeBadRequest, err.RelayMessage())
}

// Refusals every authenticated endpoint shares, verbatim from the reference.
var (
	notSigned        = fail(http.StatusUnauthorized, protocol.CodeUnauthorized, "this request is not signed")
	badSignature     = fail(http.StatusUnauthorized, protocol.CodeUnauthorized, "signature check failed")
	schemaFailed     = fail(http.StatusBadRequest, protocol.CodeBadRequest, "request failed schema validation")
	runnerUnknown    = fail(http.StatusUnauthorized, protocol.CodeUnauthorized, "this runner is not recognised")
	runnerRevoked    = fail(http.StatusForbidden, protocol.CodeRevoked, "routing for this runner has been revoked")
	siteUnregistered = fail(http.StatusUnauthorized, protocol.CodeUnauthorized, "this site is not registered")
	notYourSite      = fail(http.StatusForbidden, protocol.CodeForbidden, "that is not your site")
)
