package peers

import (
	"context"
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

// The person whose jobs run on her own device, and the site she consented
// to, in every World.
const (
	Owner  = "alice"
	SiteID = "site-peers"
)

// World is one relay with one registered site and its owner's consent,
// set up through the admin API as an operator would.
type World struct {
	Origin string
	Admin  *controlplane.Client
	// Site holds the site's keys (generated for the test) and id.
	Site *relaytest.Site
}

// NewWorld registers a fresh site at the relay at origin and records
// Owner's consent to it.
func NewWorld(t testing.TB, origin string) *World {
	t.Helper()
	return newWorld(t, origin, relaytest.NewSite(t, SiteID), Owner)
}

// SiteKeys derives a site's keys from a run's secret seed, so the test
// that registers the site and every site process it starts (a restart,
// a function) hold the same keys without a key file.
func SiteKeys(seed string) (*protocol.Keys, error) {
	id := sha256.Sum256([]byte("identity\x00" + seed + "\x00site"))
	enc := sha256.Sum256([]byte("encryption\x00" + seed + "\x00site"))
	return protocol.NewKeys(id[:], enc[:])
}

// NewSeededWorld registers site siteID with the keys of seed (SiteKeys)
// at the relay at origin and records owner's consent to it.
func NewSeededWorld(t testing.TB, origin, siteID, owner, seed string) *World {
	t.Helper()
	keys, err := SiteKeys(seed)
	if err != nil {
		t.Fatal(err)
	}
	return newWorld(t, origin, &relaytest.Site{Keys: keys, SiteID: siteID}, owner)
}

// newWorld registers site at the relay at origin, through its admin API,
// and records owner's consent to it.
func newWorld(t testing.TB, origin string, site *relaytest.Site, owner string) *World {
	t.Helper()
	ctx := context.Background()
	w := &World{Origin: origin, Admin: controlplane.NewClient(origin, nil), Site: site}
	if _, err := w.Admin.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: site.SiteID, Site: site.Public()}); err != nil {
		t.Fatalf("register site: %v", err)
	}
	if _, err := w.Admin.Consent(ctx, controlplane.ConsentAdd, controlplane.ConsentRequest{Owner: owner, SiteID: site.SiteID}); err != nil {
		t.Fatalf("consent: %v", err)
	}
	return w
}

// Approve approves a pairing code for Owner, as the approval page would.
func (w *World) Approve(t testing.TB, userCode string) controlplane.DeviceResponse {
	t.Helper()
	dev, err := w.Admin.Approve(context.Background(), controlplane.ApproveRequest{UserCode: userCode, Owner: Owner})
	if err != nil {
		t.Fatalf("approve %s: %v", userCode, err)
	}
	return dev
}

// PairDaemon starts the real daemon against the world's relay, approves
// its code and checks it paired as Owner's device, pinning the site.
func (w *World) PairDaemon(t testing.TB, model *Model) (*Daemon, Pairing) {
	t.Helper()
	d := StartDaemon(t, DaemonOptions{Origin: w.Origin, Model: model})
	dev := w.Approve(t, d.UserCode(t))
	p := d.Paired(t)
	if p.Owner != Owner || p.RunnerID != dev.Device.RunnerID {
		t.Fatalf("daemon paired as %+v, approved as %+v", p, dev.Device)
	}
	if !slices.Equal(p.Sites, []string{w.Site.KeyID()}) {
		t.Fatalf("daemon pinned sites %v, want [%s]", p.Sites, w.Site.KeyID())
	}
	return d, p
}
