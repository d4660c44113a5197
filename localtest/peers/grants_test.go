package peers_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// A relay with a control plane hands the daemon its grant-signing key at
// pairing, and the daemon then runs nothing without a grant signed by it,
// its owner's own jobs included. This drives the relay package with a test
// grant author, against the reference relay too; grants_author_test.go
// runs byorelay's own author (internal/controlplane/grants) through the full stack.
func TestRealPeersWithGrants(t *testing.T) {
	t.Parallel()
	relaysWithGrants := []target{
		{"byorelay", func(t *testing.T) string {
			cp, err := protocol.GenerateKeys()
			if err != nil {
				t.Fatal(err)
			}
			return peers.StartByorelayWith(t, func(cfg relay.Config) (*relay.Relay, error) {
				cfg.ControlPlanePublic = cp.Public().Identity
				cfg.AuthorGrant = grantEverything(cp)
				return relay.New(cfg)
			}).Origin
		}},
		{"reference relay", func(t *testing.T) string { return peers.StartReferenceRelay(t, true) }},
	}
	for _, r := range relaysWithGrants {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			w := peers.NewWorld(t, r.start(t))
			model := peers.NewModel(t, "stand-in")
			daemon, pairing := w.PairDaemon(t, model)
			if !pairing.ControlPlanePublic {
				t.Fatal("the daemon was not handed the control plane's key")
			}
			runRealPair(t, w, model, daemon, pairing)
		})
	}
}

// grantEverything is a control plane that admits every job it is asked
// about, for the service the device advertised for the job's kind.
func grantEverything(cp *protocol.Keys) grant.Author {
	return func(_ context.Context, in grant.Request) (grant.Decision, error) {
		service := ""
		for _, c := range in.Capabilities {
			if c.Kind == in.Job.Kind {
				service = c.Service
				break
			}
		}
		purpose := in.Purpose
		if purpose == "" {
			// RESERVED_PURPOSE: what the daemon compares a stub without a
			// purpose against.
			purpose = "default"
		}
		g, err := protocol.SignGrant(cp, protocol.SignedGrant{
			GrantID: rand.Text(), JobID: in.Job.ID, Site: in.SiteKey, User: in.Job.Owner, Owner: in.Owner,
			Purpose: purpose, Kind: in.Job.Kind, Service: service, IssuedAt: time.Now().UnixMilli(),
		})
		if err != nil {
			return grant.Decision{}, err
		}
		return grant.Decision{Granted: &g}, nil
	}
}
