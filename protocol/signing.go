package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The signed-request headers, as the reference relay reads them. The caller
// header belongs to one plane, so a signature cannot be moved to the other
// plane by moving the request.
const (
	HeaderRunner    = "x-byollm-runner"
	HeaderSite      = "x-byollm-site"
	HeaderIssuedAt  = "x-byollm-issued-at"
	HeaderSignature = "x-byollm-signature"
)

// requestContext is the version prefix and domain separator of the signed
// string.
const requestContext = "byollm/v1/request"

// siteEndpointPrefix keeps a site-plane signature from verifying on the
// daemon plane: "result" and "results" are one character apart, and a naming
// collision must not be what stands between a signature and a replay onto
// the wrong handler. Applied only inside the site helpers, so the two ends
// cannot disagree about it.
const siteEndpointPrefix = "site/"

// RequestSignature is the signed material a request carries in its
// headers. CallerID is the runner id on the daemon
// plane and the site id on the site plane (the reference names it runnerId
// on both).
type RequestSignature struct {
	CallerID  string
	IssuedAt  int64
	Signature string
}

// ErrUnsigned means the signature headers are missing or unusable: the
// reference answers 401 unauthorized "this request is not signed".
var ErrUnsigned = errors.New("protocol: request is not signed")

// ErrBadSignature means the signature does not verify against the key
// tried. Answered as a bare unauthorized: telling a prober which part was
// wrong is free help.
var ErrBadSignature = errors.New("protocol: signature check failed")

// ErrStale means issuedAt is outside the freshness window. It is a
// precondition failure, not an authentication one: the signature was never
// looked at, and the caller's clock is the thing to fix. Match it with
// errors.Is; errors.As a *StaleError for the numbers the clock-skew body
// needs.
var ErrStale = errors.New("protocol: request timestamp outside the freshness window")

// StaleError carries what the relay's clock-skew refusal reports: the
// verifier's time and the window.
type StaleError struct {
	ServerTime int64 // the verifier's now, epoch ms
	MaxSkewMs  int64
	IssuedAt   int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%v: issuedAt %d, server time %d, max skew %d ms", ErrStale, e.IssuedAt, e.ServerTime, e.MaxSkewMs)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// CanonicalRequest is the exact bytes both sides sign. The body goes in by
// SHA-256 of the exact bytes sent, so neither side depends on re-serialising
// JSON the way the other did.
func CanonicalRequest(endpoint, callerID string, issuedAt int64, body []byte) []byte {
	digest := sha256.Sum256(body)
	return []byte(strings.Join([]string{
		requestContext,
		endpoint,
		callerID,
		strconv.FormatInt(issuedAt, 10),
		hex.EncodeToString(digest[:]),
	}, "\n"))
}

// SignRequest signs a daemon-plane request. endpoint is the bare last path
// segment ("claim", "fetch", "heartbeat", "result", "release").
func SignRequest(keys *Keys, endpoint, runnerID string, issuedAt int64, body []byte) RequestSignature {
	return RequestSignature{
		CallerID:  runnerID,
		IssuedAt:  issuedAt,
		Signature: keys.Sign(CanonicalRequest(endpoint, runnerID, issuedAt, body)),
	}
}

// SignSiteRequest signs a site-plane request. endpoint is the bare name
// ("enqueue", "payload", "cancel", "pending", "results"); the "site/" prefix
// is added here. A GET signs the empty body.
func SignSiteRequest(keys *Keys, endpoint, siteID string, issuedAt int64, body []byte) RequestSignature {
	return SignRequest(keys, siteEndpointPrefix+endpoint, siteID, issuedAt, body)
}

// VerifyRequest checks a daemon-plane signature against a runner's pinned
// identity key, at the verifier's local time nowMs. It returns nil, a
// *StaleError (errors.Is ErrStale) or ErrBadSignature.
//
// Freshness is checked before the signature, so a stale answer says nothing
// about whether the signature was any good, and a drifted clock is told
// about its clock instead of being sent to look at its keys.
func VerifyRequest(identityPublic, endpoint string, body []byte, sig RequestSignature, nowMs int64) error {
	return verifyRequestAt(identityPublic, endpoint, body, sig, nowMs, MaxClockSkewMs)
}

// VerifySiteRequest is VerifyRequest for the site plane: the key is the
// registered site's, the caller id is the site id, and the endpoint is the
// bare name ("site/" is added here).
func VerifySiteRequest(identityPublic, endpoint string, body []byte, sig RequestSignature, nowMs int64) error {
	return verifyRequestAt(identityPublic, siteEndpointPrefix+endpoint, body, sig, nowMs, MaxClockSkewMs)
}

// VerifySiteRequestAnyKey tries a site's acceptable keys in order (the
// current key first, then, while a retirement window is open, the keys it
// succeeded) and stops at the first that verifies, as the reference relay
// does.
// A stale result ends the loop at once and is what is reported: a site whose
// clock drifted fails every key as stale, and telling it its signature was
// wrong would send it to look at its keys. With no keys at all it is
// ErrBadSignature, never success.
func VerifySiteRequestAnyKey(identities []string, endpoint string, body []byte, sig RequestSignature, nowMs int64) error {
	err := ErrBadSignature
	for _, identity := range identities {
		err = VerifySiteRequest(identity, endpoint, body, sig, nowMs)
		if err == nil || errors.Is(err, ErrStale) {
			return err
		}
	}
	return err
}

func verifyRequestAt(identityPublic, endpoint string, body []byte, sig RequestSignature, nowMs, maxSkewMs int64) error {
	skew := nowMs - sig.IssuedAt
	if skew > maxSkewMs || skew < -maxSkewMs {
		return &StaleError{ServerTime: nowMs, MaxSkewMs: maxSkewMs, IssuedAt: sig.IssuedAt}
	}
	if !verifyWith(identityPublic, CanonicalRequest(endpoint, sig.CallerID, sig.IssuedAt, body), sig.Signature) {
		return ErrBadSignature
	}
	return nil
}

// ParseSignature reads the three signature header values the way the
// reference relay does: each must be present and non-empty, and issued-at is
// read with JavaScript's Number() and must then be a positive safe integer
// (signatureFrom, then the RequestSignature schema). Pass "" for an absent
// header; the reference refuses absent and empty alike. Every failure is
// ErrUnsigned.
//
// Number() is reproduced rather than strconv.ParseInt because a signer that
// sends "1.8e12" or " 1800000000000 " is accepted by the reference, and the
// signature it made covers the canonical decimal, which is what
// CanonicalRequest writes back out.
func ParseSignature(callerID, issuedAt, signature string) (RequestSignature, error) {
	if callerID == "" || signature == "" {
		return RequestSignature{}, ErrUnsigned
	}
	at, ok := jsNumberToSafeInt(issuedAt)
	if !ok || at <= 0 {
		return RequestSignature{}, ErrUnsigned
	}
	return RequestSignature{CallerID: callerID, IssuedAt: at, Signature: signature}, nil
}

// SignatureFromHeaders is ParseSignature over HTTP headers. callerHeader is
// HeaderRunner on the daemon plane and HeaderSite on the site plane; the
// other plane's header is never read. A header sent several times reads as
// its values joined with ", ", as the Fetch API's Headers.get does. Lookups
// go through http.Header's canonical keys, so build h with Set or Add (API
// Gateway's lowercase map keys assigned directly would not be found).
func SignatureFromHeaders(h http.Header, callerHeader string) (RequestSignature, error) {
	get := func(name string) string { return strings.Join(h.Values(name), ", ") }
	return ParseSignature(get(callerHeader), get(HeaderIssuedAt), get(HeaderSignature))
}

// CanonicalHeader copies h with canonical keys, so a header map a front end
// built by hand (lower-case keys, as an API Gateway event has them) reads
// through http.Header's lookups, SignatureFromHeaders's among them, the same
// as one built with Set or Add.
func CanonicalHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		out[ck] = append(out[ck], vs...)
	}
	return out
}

// SetHeaders writes the signature onto outgoing headers under callerHeader
// (HeaderRunner or HeaderSite).
func (s RequestSignature) SetHeaders(h http.Header, callerHeader string) {
	h.Set(callerHeader, s.CallerID)
	h.Set(HeaderIssuedAt, strconv.FormatInt(s.IssuedAt, 10))
	h.Set(HeaderSignature, s.Signature)
}
