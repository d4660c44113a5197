package sitestoretest

import (
	"time"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var claimCases = []testCase{
	{"claim takes the oldest claimable first, up to max, each with a fresh lease and attempts+1", func(e *env) {
		e.create(job("first", "alice"))
		e.advance(10)
		e.create(job("second", "alice"))
		e.advance(10)
		e.create(job("third", "alice"))
		jobs := e.claim("r1", "alice", 2, generate)
		if !equal(ids(jobs), []string{"first", "second"}) {
			e.Fatalf("claimed %v", ids(jobs))
		}
		for _, j := range jobs {
			if j.State != sitestore.StateClaimed || j.Attempts != 1 || j.Lease == nil ||
				j.Lease.RunnerID != "r1" || j.Lease.ExpiresAt != e.now()+10_000 {
				e.Fatalf("granted: %+v", j)
			}
		}
		if jobs[0].Lease.ID == jobs[1].Lease.ID {
			e.Fatal("two grants share a lease id")
		}
	}},
	{"a released job is claimed again under a new lease id", func(e *env) {
		e.create(job("a", "alice"))
		first := e.claimOne("r1", "alice")
		if _, err := e.s.Release(e.ctx, sitestore.ReleaseInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: first.Lease.ID}}, Reason: protocol.ReasonBackendDown}); err != nil {
			e.Fatal(err)
		}
		second := e.claimOne("r1", "alice")
		if second.Lease.ID == first.Lease.ID || second.Attempts != 2 {
			e.Fatalf("regrant: lease %s (was %s), attempts %d", second.Lease.ID, first.Lease.ID, second.Attempts)
		}
	}},
	{"only the kinds in this claim request are served", func(e *env) {
		in := job("chat", "alice")
		in.Kind = protocol.KindChat
		e.create(in)
		if jobs := e.claim("r1", "alice", 5, generate); len(jobs) != 0 {
			e.Fatalf("a generate-only claim got %v", ids(jobs))
		}
		chat := []protocol.Capability{capability(protocol.KindChat, "ollama", protocol.AudiencePrivate)}
		if jobs := e.claim("r1", "alice", 5, chat); !equal(ids(jobs), []string{"chat"}) {
			e.Fatalf("a chat claim got %v", ids(jobs))
		}
	}},
	{"blocked and future jobs are not claimable", func(e *env) {
		e.create(job("dep", "alice"))
		e.create(job("blocked", "alice", "dep"))
		jobs := e.claim("r1", "alice", 5, generate)
		if !equal(ids(jobs), []string{"dep"}) {
			e.Fatalf("claimed %v", ids(jobs))
		}
	}},
	{"the server-side audience decision: private is the owner's, team admits a team offer on a non-subscription backend", func(e *env) {
		cases := []struct {
			name, audience string
			allow          []string
			runnerOwner    string
			capability     protocol.Capability
			want           bool
		}{
			{"owner's own private job on any backend", protocol.AudiencePrivate, nil, "alice", capability(protocol.KindGenerate, "claude-cli", protocol.AudiencePrivate), true},
			{"another owner's private job", protocol.AudiencePrivate, nil, "bob", capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam), false},
			{"team job, team offer, free backend", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam), true},
			{"team job, private offer", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "ollama", protocol.AudiencePrivate), false},
			{"team job on claude-cli", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "claude-cli", protocol.AudienceTeam), false},
			{"team job on codex-cli", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "codex-cli", protocol.AudienceTeam), false},
			{"team job on metered openai, team offer (consent assumed)", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "openai", protocol.AudienceTeam), true},
			{"team job on openai-http (treated as metered)", protocol.AudienceTeam, nil, "bob", capability(protocol.KindGenerate, "openai-http", protocol.AudienceTeam), true},
			{"team job with a roster naming the runner owner", protocol.AudienceTeam, []string{"bob"}, "bob", capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam), true},
			{"team job with a roster not naming the runner owner", protocol.AudienceTeam, []string{"carol"}, "bob", capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam), false},
			{"the owner is admitted whatever the roster says", protocol.AudienceTeam, []string{"carol"}, "alice", capability(protocol.KindGenerate, "ollama", protocol.AudiencePrivate), true},
		}
		for i, c := range cases {
			id := "job-" + c.name
			in := job(id, "alice")
			in.Audience = c.audience
			in.AudienceAllow = c.allow
			e.create(in)
			jobs := e.claim("runner-"+c.name, c.runnerOwner, 1, []protocol.Capability{c.capability})
			if got := len(jobs) == 1; got != c.want {
				e.Errorf("case %d, %s: claimed=%v, want %v", i, c.name, got, c.want)
			}
			// Leave nothing claimable for the next case.
			if _, _, err := e.s.Cancel(e.ctx, id); err != nil {
				e.Fatal(err)
			}
			e.clk.Advance(time.Millisecond)
		}
	}},
	{"the first capability for the kind is the one judged", func(e *env) {
		in := job("team", "alice")
		in.Audience = protocol.AudienceTeam
		e.create(in)
		caps := []protocol.Capability{
			capability(protocol.KindGenerate, "ollama", protocol.AudiencePrivate),
			capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam),
		}
		if jobs := e.claim("r-bob", "bob", 1, caps); len(jobs) != 0 {
			e.Fatal("a later team capability admitted a job the first (private) one refuses")
		}
	}},
	{"a runner that refused a job is never offered it again; others still are", func(e *env) {
		in := job("team", "alice")
		in.Audience = protocol.AudienceTeam
		e.create(in)
		team := []protocol.Capability{capability(protocol.KindGenerate, "ollama", protocol.AudienceTeam)}
		j := e.claim("r-bob", "bob", 1, team)[0]
		released, err := e.s.Release(e.ctx, sitestore.ReleaseInput{RunnerID: "r-bob", Leases: []protocol.GrantRef{{JobID: j.ID, LeaseID: j.Lease.ID}}, Reason: protocol.ReasonRefused})
		if err != nil || !equal(released, []string{"team"}) {
			e.Fatalf("release: %v %v", released, err)
		}
		if got := e.get("team"); !equal(got.RefusedBy, []string{"r-bob"}) || got.State != sitestore.StateQueued {
			e.Fatalf("after refusal: %+v", got)
		}
		if jobs := e.claim("r-bob", "bob", 1, team); len(jobs) != 0 {
			e.Fatal("the job was offered again to the runner that refused it")
		}
		if jobs := e.claim("r-carol", "carol", 1, team); len(jobs) != 1 {
			e.Fatal("another runner was not offered the refused job")
		}
	}},
	{"a release for another reason requeues without remembering a refusal", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		e.advance(500)
		if _, err := e.s.Release(e.ctx, sitestore.ReleaseInput{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}, Reason: protocol.ReasonShutdown}); err != nil {
			e.Fatal(err)
		}
		got := e.get("a")
		if got.State != sitestore.StateQueued || len(got.RefusedBy) != 0 || got.Lease != nil || got.ClaimableAt != e.now() {
			e.Fatalf("after release: %+v", got)
		}
	}},
	{"a release names the grant: another lease id, another runner or an unknown job releases nothing", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		for _, in := range []sitestore.ReleaseInput{
			{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: "some-other-lease"}}},
			{RunnerID: "r2", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: j.Lease.ID}}},
			{RunnerID: "r1", Leases: []protocol.GrantRef{{JobID: "nope", LeaseID: j.Lease.ID}}},
		} {
			released, err := e.s.Release(e.ctx, in)
			if err != nil || len(released) != 0 {
				e.Fatalf("release %+v: released %v, err %v", in, released, err)
			}
		}
		e.wantState("a", sitestore.StateClaimed)
	}},
}
