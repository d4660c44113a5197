package relay

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/byorelay/byorelay/protocol"
)

// OriginSecretHeader carries the edge's secret on every request the edge
// forwards (CloudFront's origin custom header when deployed). The edge sets
// it, overwriting whatever a viewer sent under the same name.
const OriginSecretHeader = "X-Byorelay-Origin-Secret"

// OriginSecrets returns the values of OriginSecretHeader the relay accepts
// now: one normally, two while a secret is being rotated (the edge may
// still send the old one while the new one is already accepted). It is
// asked on every request, so a rotation is in force without a restart; an
// implementation caches. An error is answered 500 and admits nobody.
type OriginSecrets func(ctx context.Context) ([]string, error)

// FixedOriginSecrets accepts exactly the values given, for as long as the
// process runs: the local server and tests.
func FixedOriginSecrets(values ...string) OriginSecrets {
	kept := append([]string(nil), values...)
	return func(context.Context) ([]string, error) { return kept, nil }
}

// originRefused is the lock's refusal. 403 forbidden with the protocol's
// body: the caller reached a relay, and it will not serve them here.
// Nothing in it says what would have been accepted.
var originRefused = fail(http.StatusForbidden, protocol.CodeForbidden,
	"this relay answers only through its edge")

// checkOrigin is the origin lock: without it, anyone who learns the
// origin's address (the API's own host name, a load balancer's IP) reaches
// every endpoint past the edge's TLS redirect, its rate limits and its
// logs. It runs before anything else reads the request, so a refused
// request costs no projection read and changes no state.
func (r *Relay) checkOrigin(c *call, header http.Header) (reply, bool, error) {
	if r.cfg.OriginSecrets == nil {
		return reply{}, true, nil
	}
	accepted, err := r.cfg.OriginSecrets(c.ctx)
	if err != nil {
		return reply{}, false, err
	}
	if !originSecretMatches(header.Values(OriginSecretHeader), accepted) {
		r.decide(c, "origin-refused")
		return originRefused, false, nil
	}
	return reply{}, true, nil
}

// originSecretMatches reports whether exactly one header value was sent and
// it equals one of the accepted secrets. Every accepted secret is compared,
// in constant time, whatever the outcome of the others: how long the answer
// takes must not tell a prober how much of a secret it guessed, nor which
// of two secrets it is closer to. Digests are compared rather than the
// values, because subtle.ConstantTimeCompare returns at once on a length
// mismatch and would tell a prober the secret's length. An empty secret
// accepts nothing, so a parameter left blank cannot open the lock.
func originSecretMatches(sent []string, accepted []string) bool {
	if len(sent) != 1 {
		return false
	}
	got := sha256.Sum256([]byte(sent[0]))
	match := 0
	for _, want := range accepted {
		if want == "" {
			continue
		}
		w := sha256.Sum256([]byte(want))
		match |= subtle.ConstantTimeCompare(got[:], w[:])
	}
	return match == 1
}

// PassesOriginLock reports whether a request with this header gets past
// the origin lock (always, without one), for what a function serves beside
// the relay (the catch-all's verification page): it must not be a way
// around the edge either.
func (r *Relay) PassesOriginLock(ctx context.Context, header http.Header) (bool, error) {
	if r.cfg.OriginSecrets == nil {
		return true, nil
	}
	accepted, err := r.cfg.OriginSecrets(ctx)
	if err != nil {
		return false, err
	}
	return originSecretMatches(header.Values(OriginSecretHeader), accepted), nil
}
