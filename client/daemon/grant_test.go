package daemon_test

import (
	"context"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/client/daemon"
	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
)

// withGrants stands a control plane behind the relay: its key goes to
// devices at pairing and author signs each claimed job's grant. tamper may
// change the claims before signing, or sign with another key.
func withGrants(t *testing.T, clk *clock.Manual, signer, pinned *protocol.Keys, tamper func(*protocol.SignedGrant)) func(*relay.Config) {
	return func(cfg *relay.Config) {
		cfg.ControlPlanePublic = pinned.Public().Identity
		cfg.AuthorGrant = func(ctx context.Context, in grant.Request) (grant.Decision, error) {
			purpose := in.Purpose
			if purpose == "" {
				purpose = "default"
			}
			claims := protocol.SignedGrant{
				GrantID: "grant_" + in.Job.ID, JobID: in.Job.ID, Site: in.SiteKey, User: in.Job.Owner,
				Owner: in.Owner, Purpose: purpose, Kind: in.Job.Kind, Service: "default",
				IssuedAt: clk.Now().UnixMilli(),
			}
			if tamper != nil {
				tamper(&claims)
			}
			g, err := protocol.SignGrant(signer, claims)
			if err != nil {
				return grant.Decision{}, err
			}
			return grant.Decision{Granted: &g}, nil
		}
	}
}

func TestGrantsFromThePinnedControlPlaneAdmitJobs(t *testing.T) {
	cp := mustKeys(t)
	cases := []struct {
		name   string
		signer *protocol.Keys
		tamper func(*protocol.SignedGrant)
		refuse string // "" means the job runs
	}{
		{name: "a genuine grant admits the job", signer: cp},
		{name: "a grant signed by another key is refused", signer: mustKeys(t), refuse: "bad-signature"},
		{name: "a grant for another user is refused", signer: cp,
			tamper: func(g *protocol.SignedGrant) { g.User = "mallory" }, refuse: "different user"},
		{name: "a grant for another purpose is refused", signer: cp,
			tamper: func(g *protocol.SignedGrant) { g.Purpose = "other" }, refuse: "different purpose"},
		{name: "a grant for a service this device does not offer is refused", signer: cp,
			tamper: func(g *protocol.SignedGrant) { g.Service = "elsewhere" }, refuse: "no service"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, func(cfg *relay.Config) {
				withGrants(t, cfg.Clock.(*clock.Manual), tc.signer, cp, tc.tamper)(cfg)
			})
			s := w.newSite("shop")
			w.consent("alice", "shop")
			d := w.pairDaemon("alice", "runner-a", daemon.Config{})
			if d.Pairing().ControlPlanePublic != cp.Public().Identity {
				t.Fatal("the control-plane key was not pinned at pairing")
			}
			w.publish(s, "job-1", "alice", protocol.GeneratePayload("granted?"))
			if n := w.tick(d); n != 1 {
				t.Fatalf("claimed %d", n)
			}
			if tc.refuse == "" {
				w.pump(s)
				d.events.waitFor(t, daemon.EventReported, "job-1")
				return
			}
			e := d.events.waitFor(t, daemon.EventRefused, "job-1")
			if !strings.Contains(e.Detail, tc.refuse) {
				t.Fatalf("refused for %q, want %q", e.Detail, tc.refuse)
			}
			d.events.waitFor(t, daemon.EventReleased, "job-1")
			if rep := w.pump(s); len(rep.Sealed) != 0 {
				t.Fatalf("the site sealed a refused job: %v", rep.Sealed)
			}
		})
	}
}

func mustKeys(t *testing.T) *protocol.Keys {
	t.Helper()
	k, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
