package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

// declines counts the relay's Declined metric by reason and permanence.
type declines struct {
	relay.NopMetrics
	mu     sync.Mutex
	counts map[string]int
}

func (d *declines) Declined(reason string, permanent bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]int{}
	}
	key := reason
	if permanent {
		key += " (permanent)"
	}
	d.counts[key]++
}

func (d *declines) count(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[key]
}

// withMappings is fixture b with each of owner's consents to siteID
// carrying mappings.
func withMappings(b *relaytest.FixtureBuilder, owner, siteID string, mappings ...projection.Mapping) *projection.Projection {
	f := b.Build()
	for i, c := range f.Consents {
		if c.Owner == owner && c.SiteID == siteID {
			f.Consents[i].Mappings = mappings
		}
	}
	p, err := projection.New(f)
	if err != nil {
		panic(err)
	}
	return p
}

func newGrantAuthor(t *testing.T) *grants.Author {
	t.Helper()
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	a, err := grants.New(seed, grants.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// byorelay's own grant author behind the relay's claim, on each store: the
// law is checked against the projection the claim routed by, its declines
// are released by their permanence, and each is logged and counted with its
// reason.
func TestTheGrantLawAtTheClaim(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("an unmapped slot is declined and waits; once mapped the job is granted the mapped service", func(t *testing.T) {
			author := newGrantAuthor(t)
			counted := &declines{}
			w := newWorld(t, f, func(c *relay.Config) {
				c.ControlPlanePublic = author.Public()
				c.AuthorGrant = author.Grant
				c.Metrics = counted
			})
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if job.State != "queued" || len(job.RefusedBy) != 0 || job.RetryAfter["runner-1"] != w.nowMs()+30_000 {
				t.Fatalf("job %+v, want queued with a not-before for this device", job)
			}
			if !strings.Contains(w.logs.String(), `"decision":"grant-declined"`) || !strings.Contains(w.logs.String(), `"reason":"unmapped"`) {
				t.Fatalf("the decline was not logged with its reason:\n%s", w.logs)
			}
			if counted.count("unmapped") != 1 {
				t.Fatalf("declines counted %v, want one unmapped", counted.counts)
			}

			// The person maps the slot to the service the device offers.
			w.proj.Set(withMappings(w.base().Consent("alice", "site-a"), "alice", "site-a",
				projection.Mapping{Purpose: grants.ReservedPurpose, Kind: "llm.generate", Service: "local"}))
			w.advance(30_000)
			jobs := w.claim(w.daemon, 1)
			if len(jobs) != 1 || jobs[0].Grant == nil || jobs[0].Grant.Service != "local" || jobs[0].Grant.User != "alice" {
				t.Fatalf("jobs %+v, want job-1 granted for local", jobs)
			}
		})
		t.Run("a permanent decline is released as refused, logged and counted with its reason", func(t *testing.T) {
			author := newGrantAuthor(t)
			counted := &declines{}
			routed := removedMemberWorld(t, f, author, counted)
			stub := routed.site.Stub("job-1", "bob", routed.deadline())
			stub.Audience = protocol.AudienceTeam
			expectStatus(t, routed.siteCall(routed.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub}), 200)
			expect(t, routed.daemonCall(routed.daemon, "claim", claimBody(routed.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			job, _, _ := routed.store.Job(routed.ctx, "site-a", "job-1")
			if job.State != "queued" || len(job.RefusedBy) != 1 || job.RefusedBy[0] != "runner-1" {
				t.Fatalf("job %+v, want queued and refused by this device", job)
			}
			if logs := routed.logs.String(); !strings.Contains(logs, `"reason":"not-a-member"`) || !strings.Contains(logs, `"permanent":true`) {
				t.Fatalf("the decline was not logged with its reason:\n%s", logs)
			}
			if counted.count("not-a-member (permanent)") != 1 {
				t.Fatalf("declines counted %v, want one permanent not-a-member", counted.counts)
			}
			routed.advance(3_600_000 - 1)
			if got := routed.claim(routed.daemon, 1); len(got) != 0 {
				t.Fatalf("re-offered %+v", got)
			}
		})
	})
}

// removedMemberWorld is a world whose route filter let bob's work through to alice's device
// (bob on her roster, consented and mapped to her service) while the
// authority reads bob as removed from it: it stands in for a routing bug or
// a filter that drifted, which no consistent read produces. The author is
// byorelay's own; only the projection it is handed is the removal's.
func removedMemberWorld(t *testing.T, f storeFactory, author *grants.Author, m relay.Metrics) *world {
	t.Helper()
	mapped := projection.Mapping{Purpose: grants.ReservedPurpose, Kind: "llm.generate", Service: "local", ServiceOwner: "alice"}
	var removed *projection.Projection
	world := newWorld(t, f, func(c *relay.Config) {
		c.ControlPlanePublic = author.Public()
		c.AuthorGrant = func(ctx context.Context, in grant.Request) (grant.Decision, error) {
			in.Projection = removed
			return author.Grant(ctx, in)
		}
		c.Metrics = m
	})
	removed = withMappings(world.base().Consent("alice", "site-a").Consent("bob", "site-a").Roster("alice-team", "alice"),
		"bob", "site-a", mapped)
	world.proj.Set(withMappings(world.base().Consent("alice", "site-a").Consent("bob", "site-a").Roster("alice-team", "alice", "bob"),
		"bob", "site-a", mapped))
	return world
}
