// Package relaytest signs requests as a daemon or a site would, with real
// keys, so tests of the relay (and of anything wired in front of it: the
// Lambda functions, the local server) exercise the same verification a real
// caller meets. It also builds projections for those tests.
//
// Nothing here holds a fixed key: every bundle is generated on the spot.
package relaytest

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
)

// BasePath is the daemon plane's default mount.
const BasePath = "/byollm"

// Daemon is a paired machine: its keys, the runner id the control plane
// gave it and its owner.
type Daemon struct {
	Keys     *protocol.Keys
	RunnerID string
	Owner    string
}

// NewDaemon generates a device's keys.
func NewDaemon(t testing.TB, runnerID, owner string) *Daemon {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return &Daemon{Keys: keys, RunnerID: runnerID, Owner: owner}
}

// Public is the device's public identity.
func (d *Daemon) Public() protocol.PublicIdentity { return d.Keys.Public() }

// Record is the device as the control plane approved it.
func (d *Daemon) Record() projection.DeviceRecord {
	return projection.DeviceRecord{Owner: d.Owner, RunnerID: d.RunnerID, Device: d.Public()}
}

// Request is a signed POST to the daemon plane at BasePath/endpoint,
// signed at the given instant over body's exact bytes. body is a []byte
// sent as is, or any value encoded as the reference would.
func (d *Daemon) Request(t testing.TB, endpoint string, at time.Time, body any) relay.Request {
	t.Helper()
	return SignedDaemonRequest(t, d.Keys, d.RunnerID, endpoint, at, body)
}

// Site is a registered site: its keys and its control-plane id.
type Site struct {
	Keys   *protocol.Keys
	SiteID string
}

// NewSite generates a site's keys.
func NewSite(t testing.TB, siteID string) *Site {
	t.Helper()
	keys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return &Site{Keys: keys, SiteID: siteID}
}

// KeyID is the site's current key id: what its stubs name in JobStub.site.
func (s *Site) KeyID() string { return s.Keys.KeyID() }

// Public is the site's public identity.
func (s *Site) Public() protocol.PublicIdentity { return s.Keys.Public() }

// Record is the site as the control plane registered it.
func (s *Site) Record() projection.SiteRecord {
	return projection.SiteRecord{SiteID: s.SiteID, Site: s.Public()}
}

// Rotate gives the site a new key and returns the record a control plane
// would publish: the new key current, the old one linked by a succession
// signed with it and allowed to sign until retiringUntil (epoch ms; 0 for
// no window).
func (s *Site) Rotate(t testing.TB, retiringUntil int64) projection.SiteRecord {
	t.Helper()
	next, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	link, err := protocol.SignSuccession(s.Keys, next.Public())
	if err != nil {
		t.Fatal(err)
	}
	s.Keys = next
	return projection.SiteRecord{SiteID: s.SiteID, Site: next.Public(), Succeeds: []protocol.Succession{link}, RetiringUntil: retiringUntil}
}

// Request is a signed site-plane request. enqueue, payload and cancel are
// POSTs carrying body; pending and results are GETs with siteId and
// protocolVersion in the query, signed over the empty body (body is
// ignored).
func (s *Site) Request(t testing.TB, endpoint string, at time.Time, body any) relay.Request {
	t.Helper()
	return SignedSiteRequest(t, s.Keys, s.SiteID, endpoint, at, body)
}

// Stub is a job stub naming this site by its current key id, for owner,
// due at deadlineAt (epoch ms).
func (s *Site) Stub(id, owner string, deadlineAt int64) protocol.JobStub {
	return protocol.JobStub{
		ID: id, Kind: "llm.generate", Owner: owner, Site: s.KeyID(),
		Audience: "private", SizeClass: "small", DeadlineAt: deadlineAt,
	}
}

// Seal seals plaintext from this site to a device for jobID, as a site
// answering pending does.
func (s *Site) Seal(t testing.TB, jobID, plaintext string, to protocol.PublicIdentity, deadlineAt int64) protocol.SealedEnvelope {
	t.Helper()
	recipient, err := protocol.KeyID(to.Identity)
	if err != nil {
		t.Fatal(err)
	}
	env, err := protocol.Seal(plaintext, s.Keys, to.Encryption, protocol.EnvelopeContext{
		JobID: jobID, SenderKeyID: s.KeyID(), RecipientKeyID: recipient,
		DeadlineAt: deadlineAt, Direction: protocol.DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// SealResult seals a result from this daemon back to a site for jobID.
func (d *Daemon) SealResult(t testing.TB, jobID, plaintext string, to protocol.PublicIdentity, deadlineAt int64) protocol.SealedEnvelope {
	t.Helper()
	recipient, err := protocol.KeyID(to.Identity)
	if err != nil {
		t.Fatal(err)
	}
	env, err := protocol.Seal(plaintext, d.Keys, to.Encryption, protocol.EnvelopeContext{
		JobID: jobID, SenderKeyID: d.Keys.KeyID(), RecipientKeyID: recipient,
		DeadlineAt: deadlineAt, Direction: protocol.DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// SignedDaemonRequest is a POST to BasePath/endpoint signed by keys as
// runnerID at the instant at.
func SignedDaemonRequest(t testing.TB, keys *protocol.Keys, runnerID, endpoint string, at time.Time, body any) relay.Request {
	t.Helper()
	raw := Body(t, body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	protocol.SignRequest(keys, endpoint, runnerID, at.UnixMilli(), raw).SetHeaders(h, protocol.HeaderRunner)
	return relay.Request{Method: http.MethodPost, Path: BasePath + "/" + endpoint, Header: h, Body: raw}
}

// SignedSiteRequest is a site-plane request to /relay/site/endpoint signed
// by keys as siteID at the instant at. pending and results are GETs
// (siteId and protocolVersion in the query, empty body); the rest are POSTs
// of body.
func SignedSiteRequest(t testing.TB, keys *protocol.Keys, siteID, endpoint string, at time.Time, body any) relay.Request {
	t.Helper()
	h := http.Header{}
	req := relay.Request{Path: "/relay/site/" + endpoint, Header: h}
	if endpoint == "pending" || endpoint == "results" {
		req.Method = http.MethodGet
		req.RawQuery = url.Values{"siteId": {siteID}, "protocolVersion": {protocol.ProtocolVersion}}.Encode()
	} else {
		req.Method = http.MethodPost
		req.Body = Body(t, body)
		h.Set("Content-Type", "application/json")
	}
	protocol.SignSiteRequest(keys, endpoint, siteID, at.UnixMilli(), req.Body).SetHeaders(h, protocol.HeaderSite)
	return req
}

// Body is body's wire bytes: a []byte or string as is, nil as empty,
// anything else encoded as the reference's JSON.stringify would.
func Body(t testing.TB, body any) []byte {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case []byte:
		return b
	case string:
		return []byte(b)
	}
	raw, err := protocol.Encode(body)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Ms is t in epoch milliseconds, as a decimal string.
func Ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
