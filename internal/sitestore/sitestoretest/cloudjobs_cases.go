package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// The job shapes the cloud lane takes as the direct lane does: a
// dependent published only once unblocked, a roster enforced at the seal,
// and an attempt counted per grant sealed.
var cloudJobCases = []testCase{
	{"a cloud job a dependency blocks is listed unpublished only once every dependency completed ok", func(e *env) {
		e.create(cloudJob("draft"))
		e.create(cloudJob("doomed"))
		after := cloudJob("review")
		after.DependsOn, after.DeadlineAt = []string{"draft"}, 0
		if j := e.create(after); j.ClaimableAt != 0 || j.NeedsPublish() {
			e.Fatalf("a blocked dependent is to publish: %+v", j)
		}
		never := cloudJob("never")
		never.DependsOn = []string{"doomed"}
		e.create(never)
		if got := e.unpublished(); !equal(got, []string{"doomed", "draft"}) {
			e.Fatalf("unpublished: %v, want the two with nothing to wait for", got)
		}
		for _, id := range []string{"draft", "doomed"} {
			if _, _, err := e.s.MarkPublished(e.ctx, id); err != nil {
				e.Fatal(err)
			}
		}
		if _, _, err := e.s.Cancel(e.ctx, "doomed"); err != nil {
			e.Fatal(err)
		}
		e.advance(5)
		if _, ok := e.sealTo("draft", "lease-1", device("a")); !ok {
			e.Fatal("seal refused")
		}
		if res := e.completeBy("draft", "lease-1", device("a")); !res.Accepted {
			e.Fatalf("complete: %+v", res)
		}
		if _, err := e.s.ExpireDue(e.ctx); err != nil { // finishes an interrupted unblock, if any
			e.Fatal(err)
		}
		if got := e.unpublished(); !equal(got, []string{"review"}) {
			e.Fatalf("unpublished: %v, want the review alone (a dependent of a cancelled job never is)", got)
		}
		j := e.get("review")
		if j.ClaimableAt != e.now() || sitestore.DeadlineFor(j, 0) != e.now()+j.TTLMs {
			e.Fatalf("the review unblocked at %d (now %d), deadline %d", j.ClaimableAt, e.now(), sitestore.DeadlineFor(j, 0))
		}
	}},
	{"a roster admits to the seal only the devices it names, by runner id or key id", func(e *env) {
		named, err := protocol.GenerateKeys()
		if err != nil {
			e.Fatal(err)
		}
		seal := func(id, lease, runner string, d protocol.PublicIdentity) (sitestore.Job, bool) {
			e.Helper()
			j, ok, err := e.s.SealTo(e.ctx, sitestore.SealToInput{JobID: id, LeaseID: lease, ExpiresAt: e.now() + 5_000, Device: d, RunnerID: runner})
			if err != nil {
				e.Fatal(err)
			}
			return j, ok
		}
		byRunner := cloudJob("by-runner")
		byRunner.AudienceAllow = []string{"runner-b"}
		e.create(byRunner)
		if j, ok := seal("by-runner", "lease-1", "runner-a", device("a")); ok || len(j.SealedTo) != 0 || j.Attempts != 0 || j.State != sitestore.StateQueued {
			e.Fatalf("sealed to a device the roster does not name: %+v", j)
		}
		if j, ok := seal("by-runner", "lease-2", "runner-b", device("b")); !ok || !equal(ids([]sitestore.Job{j}), []string{"by-runner"}) || len(j.SealedTo) != 1 {
			e.Fatalf("the named runner's seal: %v %+v", ok, j)
		}
		byKey := cloudJob("by-key")
		byKey.AudienceAllow = []string{named.KeyID()}
		e.create(byKey)
		if _, ok := seal("by-key", "lease-3", "runner-a", device("a")); ok {
			e.Fatal("sealed to a device whose key the roster does not name")
		}
		if _, ok := seal("by-key", "lease-4", "runner-c", named.Public()); !ok {
			e.Fatal("the device whose key id the roster names was refused")
		}
	}},
	{"each grant sealed counts one attempt; sealing the same grant again does not", func(e *env) {
		e.create(cloudJob("a"))
		for _, step := range []struct {
			lease string
			want  int64
		}{{"lease-1", 1}, {"lease-1", 1}, {"lease-2", 2}} {
			j, ok := e.sealTo("a", step.lease, device("a"))
			if !ok || j.Attempts != step.want || e.get("a").Attempts != step.want {
				e.Fatalf("after sealing %s: %v, attempts %d, want %d", step.lease, ok, j.Attempts, step.want)
			}
		}
	}},
}
