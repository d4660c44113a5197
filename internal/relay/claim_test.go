package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/grant"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

func grantAll(_ context.Context, in grant.Request) (grant.Decision, error) {
	return grant.Decision{Granted: &protocol.SignedGrant{
		GrantID: "g-" + in.Job.ID, JobID: in.Job.ID, Site: in.SiteKey, User: in.Job.Owner, Owner: in.Owner,
		Purpose: "chat", Kind: in.Job.Kind, Service: "local", IssuedAt: 1, Signature: "sig",
	}}, nil
}

func TestClaim(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("grants a queued job with a lease, in the reference's bytes", func(t *testing.T) {
			w := newWorld(t, f)
			stub := w.enqueue(w.site, "job-1", "alice")
			resp := w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 4))
			expectStatus(t, resp, 200)
			jobs := decode[protocol.ClaimResponse](t, resp).Jobs
			if len(jobs) != 1 {
				t.Fatalf("jobs %+v", jobs)
			}
			lease := protocol.Lease{ID: jobs[0].Lease.ID, RunnerID: "runner-1", ExpiresAt: w.nowMs() + 60_000}
			want := `{"jobs":[` + encodeJS(t, protocol.Claimed(stub, lease, nil)) + `],"leaseMs":60000}`
			expect(t, resp, 200, want)
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if job.State != "awaiting-payload" || job.ClaimedBy.Owner != "alice" {
				t.Fatalf("job %+v", job)
			}
		})
		t.Run("an empty queue answers an empty list", func(t *testing.T) {
			w := newWorld(t, f)
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
		})
		t.Run("the lease length is the configured one", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.LeaseMs = 45_000 })
			w.enqueue(w.site, "job-1", "alice")
			resp := w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1))
			got := decode[protocol.ClaimResponse](t, resp)
			if got.LeaseMs != 45_000 || got.Jobs[0].Lease.ExpiresAt != w.nowMs()+45_000 {
				t.Fatalf("claim %+v", got)
			}
		})
		t.Run("only advertised kinds are offered", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			body := claimBody(w.daemon, 1)
			body.Capabilities = capabilities("llm.chat")
			expect(t, w.daemonCall(w.daemon, "claim", body), 200, `{"jobs":[],"leaseMs":60000}`)
		})
		t.Run("a job owner with no consent of their own is not routed", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "bob")
			if got := w.claim(w.daemon, 1); len(got) != 0 {
				t.Fatalf("claimed %+v", got)
			}
		})
		t.Run("a revoked route stops routing without revoking the device", func(t *testing.T) {
			w := newWorld(t, f)
			w.project(w.base().Consent("alice", "site-a").Revoke("alice", "site-a"))
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if job.State != "queued" {
				t.Fatalf("state %s", job.State)
			}
		})
		t.Run("paused consent routes nothing, and unpausing routes the same job without re-pairing", func(t *testing.T) {
			w := newWorld(t, f)
			w.project(w.base().Paused("alice", "site-a"))
			w.enqueue(w.site, "job-1", "alice")
			if got := w.claim(w.daemon, 1); len(got) != 0 {
				t.Fatalf("claimed while paused: %+v", got)
			}
			w.project(w.base().Consent("alice", "site-a"))
			if got := w.claim(w.daemon, 1); len(got) != 1 || got[0].ID != "job-1" {
				t.Fatalf("claimed %+v", got)
			}
		})
		t.Run("a roster runs a consenting member's work, and pause on either side stops it", func(t *testing.T) {
			w := newWorld(t, f)
			bob := relaytest.NewDaemon(t, "runner-bob", "bob")
			roster := func(b *relaytest.FixtureBuilder) *relaytest.FixtureBuilder {
				return b.Device(bob).Roster("team", "bob", "alice")
			}
			w.project(roster(w.base().Consent("alice", "site-a").Consent("bob", "site-a")))
			stub := w.site.Stub("team-job", "alice", w.deadline())
			stub.Audience = "team"
			expect(t, w.siteCall(w.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub}), 200, `{"jobId":"team-job","state":"queued"}`)
			w.enqueue(w.site, "bob-job", "bob")

			// The member paused: only bob's own work runs on bob's machine.
			w.project(roster(w.base().Paused("alice", "site-a").Consent("bob", "site-a")))
			if got := w.claim(bob, 4); len(got) != 1 || got[0].ID != "bob-job" {
				t.Fatalf("claimed %+v", got)
			}
			// The machine owner paused: the member's job does not run there.
			w.project(roster(w.base().Consent("alice", "site-a").Paused("bob", "site-a")))
			if got := w.claim(bob, 4); len(got) != 0 {
				t.Fatalf("claimed %+v", got)
			}
			w.project(roster(w.base().Consent("alice", "site-a").Consent("bob", "site-a")))
			if got := w.claim(bob, 4); len(got) != 1 || got[0].ID != "team-job" {
				t.Fatalf("claimed %+v", got)
			}
		})
		t.Run("another site's jobs never reach a daemon whose owner did not consent to it", func(t *testing.T) {
			w := newWorld(t, f)
			other := relaytest.NewSite(t, "site-b")
			w.project(w.base().Site(other).Consent("alice", "site-a"))
			w.enqueue(other, "job-b", "alice")
			if got := w.claim(w.daemon, 4); len(got) != 0 {
				t.Fatalf("claimed %+v", got)
			}
		})
		t.Run("at most two unsealed grants per site and owner", func(t *testing.T) {
			w := newWorld(t, f)
			for _, id := range []string{"j1", "j2", "j3"} {
				w.enqueue(w.site, id, "alice")
			}
			if got := w.claim(w.daemon, 8); len(got) != 2 {
				t.Fatalf("claimed %d", len(got))
			}
		})
		t.Run("concurrent claims never grant one job twice", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "only", "alice")
			second := relaytest.NewDaemon(t, "runner-2", "alice")
			w.project(w.base().Device(second).Consent("alice", "site-a"))
			var mu sync.Mutex
			total := 0
			var wg sync.WaitGroup
			for _, d := range []*relaytest.Daemon{w.daemon, second, w.daemon, second} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp := w.relay.Handle(w.ctx, (d.Request(t, "claim", w.now(), claimBody(d, 1))))
					var got protocol.ClaimResponse
					if resp.Status == 200 {
						got = decodeNoFatal(resp)
					}
					mu.Lock()
					total += len(got.Jobs)
					mu.Unlock()
				}()
			}
			wg.Wait()
			if total != 1 {
				t.Fatalf("granted %d times", total)
			}
		})
	})
}

func TestClaimWithGrants(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("each won job carries the control plane's grant, asked with the stub's own facts", func(t *testing.T) {
			var asked []grant.Request
			w := newWorld(t, f, func(c *relay.Config) {
				c.ControlPlanePublic = "cp"
				c.AuthorGrant = func(ctx context.Context, in grant.Request) (grant.Decision, error) {
					asked = append(asked, in)
					return grantAll(ctx, in)
				}
			})
			stub := w.site.Stub("job-1", "alice", w.deadline())
			stub.Purpose = "summarise"
			expectStatus(t, w.siteCall(w.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub}), 200)
			resp := w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1))
			jobs := decode[protocol.ClaimResponse](t, resp).Jobs
			if len(jobs) != 1 || jobs[0].Grant == nil || jobs[0].Grant.GrantID != "g-job-1" {
				t.Fatalf("jobs %+v", jobs)
			}
			g, _ := grantAll(context.Background(), asked[0])
			want := `{"jobs":[` + encodeJS(t, protocol.Claimed(stub, jobs[0].Lease, g.Granted)) + `],"leaseMs":60000}`
			expect(t, resp, 200, want)
			in := asked[0]
			if in.SiteID != "site-a" || in.SiteKey != w.site.KeyID() || in.Purpose != "summarise" || in.Owner != "alice" ||
				in.RunnerID != "runner-1" || len(in.Capabilities) != 1 || in.Job.ID != "job-1" {
				t.Fatalf("asked %+v", in)
			}
		})
		t.Run("a permanent decline is released as refused and never offered to this device again", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) {
				c.AuthorGrant = func(context.Context, grant.Request) (grant.Decision, error) {
					return grant.Decision{Declined: &grant.Decline{Permanent: true, Reason: "removed"}}, nil
				}
			})
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if job.State != "queued" || len(job.RefusedBy) != 1 || job.RefusedBy[0] != "runner-1" {
				t.Fatalf("job %+v", job)
			}
			w.advance(3_600_000 - 1)
			w.rebuild(func(c *relay.Config) { c.AuthorGrant = grantAll })
			if got := w.claim(w.daemon, 1); len(got) != 0 {
				t.Fatalf("re-offered %+v", got)
			}
		})
		t.Run("a transient decline goes back with a thirty-second not-before", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) {
				c.AuthorGrant = func(context.Context, grant.Request) (grant.Decision, error) {
					return grant.Decision{Declined: &grant.Decline{Reason: "other-device"}}, nil
				}
			})
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			w.rebuild(func(c *relay.Config) { c.AuthorGrant = grantAll })
			w.advance(29_999)
			if got := w.claim(w.daemon, 1); len(got) != 0 {
				t.Fatalf("re-offered inside the not-before: %+v", got)
			}
			w.advance(1)
			if got := w.claim(w.daemon, 1); len(got) != 1 {
				t.Fatalf("not re-offered after the not-before")
			}
		})
		t.Run("a stub naming a key the projection cannot place is declined transiently, without asking", func(t *testing.T) {
			asked := 0
			w := newWorld(t, f, func(c *relay.Config) {
				c.AuthorGrant = func(ctx context.Context, in grant.Request) (grant.Decision, error) {
					asked++
					return grantAll(ctx, in)
				}
			})
			w.enqueue(w.site, "job-1", "alice")
			// The site rotates and the projection now names only the new key:
			// the queued stub names the old one.
			w.project(relaytest.NewFixture().SiteRecord(w.site.Rotate(t, 0)).Device(w.daemon).Consent("alice", "site-a"))
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if asked != 0 || job.State != "queued" || job.RetryAfter["runner-1"] != w.nowMs()+30_000 {
				t.Fatalf("asked %d, job %+v", asked, job)
			}
		})
		t.Run("an author that fails fails the request", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) {
				c.AuthorGrant = func(context.Context, grant.Request) (grant.Decision, error) {
					return grant.Decision{}, errors.New("policy store down")
				}
			})
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 500, errBody("server-error", "the relay could not answer this request; try again shortly"))
			if w.logs.Len() == 0 || !contains(w.logs.String(), "policy store down") {
				t.Fatal("the failure was not logged")
			}
		})
	})
}

// AwaitingOpened is what a front end wakes the sweeper by: told the first
// awaiting-payload window a claim's answer opened, in the store's time,
// read back from the job the store stamped, and told nothing else.
func TestClaimAwaitingUntil(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("is the window the store stamped on the grants", func(t *testing.T) {
			var told []int64
			w := newWorld(t, f, func(c *relay.Config) { c.LeaseMs = 45_000 }, tellInto(&told))
			w.enqueue(w.site, "job-1", "alice")
			w.enqueue(w.site, "job-2", "alice")
			resp := w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 2))
			if jobs := decode[protocol.ClaimResponse](t, resp).Jobs; len(jobs) != 2 {
				t.Fatalf("jobs %+v", jobs)
			}
			for _, id := range []string{"job-1", "job-2"} {
				job, _, _ := w.store.Job(w.ctx, "site-a", id)
				if job.AwaitingUntil == 0 || len(told) != 1 || told[0] != job.AwaitingUntil {
					t.Fatalf("told %v, the store stamped %s with %d", told, id, job.AwaitingUntil)
				}
			}
		})
		t.Run("follows the store's configured window", func(t *testing.T) {
			var told []int64
			w := newWorld(t, f, tellInto(&told))
			s := f.new(t, store.Options{Clock: w.clock, AwaitingPayloadMs: 3_000})
			w.store = s
			w.rebuild(func(c *relay.Config) { c.Store, c.Pairing = s, s })
			w.enqueue(w.site, "job-1", "alice")
			w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1))
			job, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if job.AwaitingUntil != w.nowMs()+3_000 || len(told) != 1 || told[0] != job.AwaitingUntil {
				t.Fatalf("told %v, the store stamped %d", told, job.AwaitingUntil)
			}
		})
		t.Run("is not told when the claim grants nothing", func(t *testing.T) {
			var told []int64
			w := newWorld(t, f, tellInto(&told))
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			if len(told) != 0 {
				t.Fatalf("told %v", told)
			}
		})
		t.Run("is not told when every grant is declined", func(t *testing.T) {
			var told []int64
			w := newWorld(t, f, func(c *relay.Config) {
				c.AuthorGrant = func(context.Context, grant.Request) (grant.Decision, error) {
					return grant.Decision{Declined: &grant.Decline{Reason: "other-device"}}, nil
				}
			}, tellInto(&told))
			w.enqueue(w.site, "job-1", "alice")
			expect(t, w.daemonCall(w.daemon, "claim", claimBody(w.daemon, 1)), 200, `{"jobs":[],"leaseMs":60000}`)
			if len(told) != 0 {
				t.Fatalf("told %v", told)
			}
		})
		t.Run("is not told of other answers", func(t *testing.T) {
			var told []int64
			w := newWorld(t, f, tellInto(&told))
			stub := w.site.Stub("job-1", "alice", w.deadline())
			expectStatus(t, w.siteCall(w.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: stub}), 200)
			if len(told) != 0 {
				t.Fatalf("told %v", told)
			}
		})
	})
}

// tellInto has the relay's AwaitingOpened append to told.
func tellInto(told *[]int64) func(*relay.Config) {
	return func(c *relay.Config) {
		c.AwaitingOpened = func(_ context.Context, untilMs int64) { *told = append(*told, untilMs) }
	}
}
