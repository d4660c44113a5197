package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// cloudJob is a job published to a relay: a deadline, and its stub not yet
// accepted.
func cloudJob(id string) sitestore.CreateInput {
	in := job(id, "alice")
	in.Audience = protocol.AudienceTeam
	in.AwaitingPublish = true
	in.DeadlineAt = Start.UnixMilli() + 60_000
	in.TTLMs = 60_000
	return in
}

func device(n string) protocol.PublicIdentity {
	return protocol.PublicIdentity{Identity: "id-" + n, Encryption: "enc-" + n, EncryptionSig: "sig-" + n}
}

func (e *env) sealTo(id, lease string, d protocol.PublicIdentity) (sitestore.Job, bool) {
	e.Helper()
	j, ok, err := e.s.SealTo(e.ctx, sitestore.SealToInput{JobID: id, LeaseID: lease, ExpiresAt: e.now() + 5_000, Device: d})
	if err != nil {
		e.Fatalf("seal %s: %v", id, err)
	}
	return j, ok
}

func (e *env) completeBy(id, lease string, d protocol.PublicIdentity) sitestore.CompleteResult {
	e.Helper()
	res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{
		JobID: id, RunnerID: "relay-runner", Holder: sitestore.HolderByDevice(d, lease),
		Outcome: okOutcome(), Provenance: sitestore.Provenance{Audience: "team", RunnerID: "relay-runner", Untrusted: true},
	})
	if err != nil {
		e.Fatalf("complete %s: %v", id, err)
	}
	return res
}

func (e *env) unpublished() []string {
	e.Helper()
	jobs, err := e.s.Unpublished(e.ctx)
	if err != nil {
		e.Fatalf("unpublished: %v", err)
	}
	return ids(jobs)
}

var cloudCases = []testCase{
	{"a cloud job is listed unpublished until the relay accepts its stub, and only then", func(e *env) {
		e.create(cloudJob("a"))
		e.advance(1)
		e.create(cloudJob("b"))
		e.create(job("direct", "alice"))
		if got := e.unpublished(); !equal(got, []string{"a", "b"}) {
			e.Fatalf("unpublished: %v, want [a b]", got)
		}
		if j, ok, err := e.s.MarkPublished(e.ctx, "a"); err != nil || !ok || j.AwaitingPublish {
			e.Fatalf("mark published: %+v %v %v", j, ok, err)
		}
		if _, ok, _ := e.s.MarkPublished(e.ctx, "a"); ok {
			e.Fatal("marked published twice")
		}
		if _, ok, _ := e.s.MarkPublished(e.ctx, "nope"); ok {
			e.Fatal("marked an unknown job published")
		}
		if got := e.unpublished(); !equal(got, []string{"b"}) {
			e.Fatalf("unpublished: %v, want [b]", got)
		}
		e.advance(60_000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		if got := e.unpublished(); len(got) != 0 {
			e.Fatalf("an expired job is still to publish: %v", got)
		}
	}},
	{"the stream grant is the latest seal's lease and device, read back by any reader of the store", func(e *env) {
		e.create(cloudJob("a"))
		if got := e.get("a"); got.StreamGrant != nil {
			e.Fatalf("an unsealed job has a stream grant: %+v", got.StreamGrant)
		}
		want := func(lease string, d protocol.PublicIdentity) {
			e.Helper()
			got := e.get("a")
			if got.StreamGrant == nil || got.StreamGrant.LeaseID != lease || got.StreamGrant.Device != d {
				e.Fatalf("stream grant: %+v, want %s %+v", got.StreamGrant, lease, d)
			}
		}
		e.sealTo("a", "L1", device("d1"))
		want("L1", device("d1"))
		// A re-claim under a new lease re-keys the stream, even by the
		// same device.
		e.sealTo("a", "L2", device("d1"))
		want("L2", device("d1"))
		e.sealTo("a", "L3", device("d2"))
		want("L3", device("d2"))
		// A refused seal (the job is cancelled) leaves the grant as it was.
		if _, _, err := e.s.Cancel(e.ctx, "a"); err != nil {
			e.Fatal(err)
		}
		if _, ok := e.sealTo("a", "L4", device("d3")); ok {
			e.Fatal("sealed a cancelled job")
		}
		want("L3", device("d2"))
	}},
	{"the stream grant outlives the result, so the relay's frames stay readable", func(e *env) {
		e.create(cloudJob("a"))
		e.sealTo("a", "L1", device("d1"))
		if res := e.completeBy("a", "L1", device("d1")); !res.Accepted {
			e.Fatalf("complete: %+v", res)
		}
		if got := e.get("a"); got.StreamGrant == nil || got.StreamGrant.LeaseID != "L1" || got.StreamGrant.Device != device("d1") {
			e.Fatalf("stream grant after the result: %+v", got.StreamGrant)
		}
	}},
	{"sealing adopts the relay's lease and records the device before the payload leaves", func(e *env) {
		e.create(cloudJob("a"))
		j, ok := e.sealTo("a", "L1", device("d1"))
		if !ok || !j.Adopted() || j.Lease.ID != "L1" || j.State != sitestore.StateClaimed || len(j.SealedTo) != 1 {
			e.Fatalf("seal: %+v %v", j, ok)
		}
		// The same device re-claims after the awaiting window lapsed:
		// a new lease, still one device.
		j, ok = e.sealTo("a", "L2", device("d1"))
		if !ok || j.Lease.ID != "L2" || len(j.SealedTo) != 1 {
			e.Fatalf("reseal: %+v %v", j, ok)
		}
		j, _ = e.sealTo("a", "L3", device("d2"))
		if got := e.get("a"); len(got.SealedTo) != 2 || got.SealedTo[1] != device("d2") || got.Lease.ID != "L3" {
			e.Fatalf("stored: %+v (returned %+v)", got, j)
		}
		// An adopted lease never lapses: only the deadline ends it (the
		// relay, not this site, decides when its lease lapses),
		// and for a job sealed to a device not before the relay's grace.
		e.advance(30_000)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateClaimed)
		e.advance(30_000 + protocol.ResultGraceMs)
		if _, err := e.s.ExpireDue(e.ctx); err != nil {
			e.Fatal(err)
		}
		e.wantState("a", sitestore.StateExpired)
	}},
	{"a job sealed to a device outlives its deadline until the pump's cut or the relay's grace", func(e *env) {
		dl := Start.UnixMilli() + 60_000
		for _, id := range []string{"done", "cut", "grace", "unsealed"} {
			in := cloudJob(id)
			if id == "grace" {
				in.DeadlineAt, in.TTLMs = dl+1_000, 61_000
			}
			e.create(in)
			if id != "unsealed" {
				e.sealTo(id, "L1", device("d1"))
			}
		}
		e.advance(60_000) // at the deadline
		expired := func(before int64) []string {
			e.Helper()
			changed, err := e.s.ExpireDueBefore(e.ctx, before)
			if err != nil {
				e.Fatal(err)
			}
			return ids(changed)
		}
		if got := expired(0); !equal(got, []string{"unsealed"}) {
			e.Fatalf("expired at the deadline: %v, want only the job never sealed", got)
		}
		if j, ok := e.sealTo("done", "L2", device("d2")); ok || j.State != sitestore.StateClaimed {
			e.Fatalf("sealed past the deadline: %+v", j)
		}
		if j, _, err := e.s.Refresh(e.ctx, "done"); err != nil || j.State != sitestore.StateClaimed {
			e.Fatalf("refresh at the deadline: %+v %v", j, err)
		}
		// The result the relay accepted in the deadline's last instant.
		if res := e.completeBy("done", "L1", device("d1")); !res.Accepted || res.Job.State != sitestore.StateOK {
			e.Fatalf("a result past the deadline, within the grace: %+v", res)
		}
		if got := expired(dl - 1); len(got) != 0 {
			e.Fatalf("expired by a cut before the deadline: %v", got)
		}
		// A cut past the clock is the clock: never before the deadline.
		if got := expired(dl + 30_000); !equal(got, []string{"cut"}) {
			e.Fatalf("expired by a cut at the deadline: %v, want [cut]", got)
		}
		e.advance(1_000 + protocol.ResultGraceMs - 1)
		if got := expired(0); len(got) != 0 {
			e.Fatalf("expired within the grace: %v", got)
		}
		e.advance(1)
		if got := expired(0); !equal(got, []string{"grace"}) {
			e.Fatalf("expired once the grace passed: %v, want [grace]", got)
		}
		e.wantState("done", sitestore.StateOK)
	}},
	{"nothing is sealed for a finished, expired, cancelled or unknown job", func(e *env) {
		e.create(cloudJob("done"))
		e.sealTo("done", "L1", device("d1"))
		e.completeBy("done", "L1", device("d1"))
		e.create(cloudJob("cancelled"))
		if _, _, err := e.s.Cancel(e.ctx, "cancelled"); err != nil {
			e.Fatal(err)
		}
		e.create(cloudJob("asked"))
		e.sealTo("asked", "L1", device("d1"))
		if _, _, err := e.s.Cancel(e.ctx, "asked"); err != nil {
			e.Fatal(err)
		}
		for _, id := range []string{"done", "cancelled", "asked", "nope"} {
			if _, ok := e.sealTo(id, "L9", device("d9")); ok {
				e.Fatalf("sealed %s", id)
			}
		}
		e.create(cloudJob("late"))
		e.advance(60_000)
		if j, ok := e.sealTo("late", "L1", device("d1")); ok || j.State != sitestore.StateExpired {
			e.Fatalf("sealed a job past its deadline: %+v", j)
		}
	}},
	{"a result is accepted once, from a device the payload was sealed to, under any lease", func(e *env) {
		e.create(cloudJob("a"))
		e.sealTo("a", "L1", device("d1"))
		if res := e.completeBy("a", "L1", device("stranger")); res.Accepted {
			e.Fatal("accepted a result from a device never sealed to")
		}
		// The seal landed on a newer lease the site never read.
		res := e.completeBy("a", "L2", device("d1"))
		if !res.Accepted || res.Job.State != sitestore.StateOK || res.Job.CompletedByLeaseID != "L2" || res.Job.Lease != nil {
			e.Fatalf("complete: %+v", res)
		}
		if again := e.completeBy("a", "L2", device("d1")); again.Accepted {
			e.Fatal("accepted a result twice")
		}
		if _, ok, _ := e.s.End(e.ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "x", false), Reason: "x"}); ok {
			e.Fatal("ended a finished job again")
		}
		e.wantState("a", sitestore.StateOK)
	}},
	{"an eviction or a refused result ends a live job terminally with its reason, once", func(e *env) {
		e.create(cloudJob("a"))
		e.sealTo("a", "L1", device("d1"))
		j, ok, err := e.s.End(e.ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "unsealed three times", false), Reason: "evicted"})
		if err != nil || !ok || j.State != sitestore.StateError || j.EndReason != "evicted" || j.Lease != nil || j.Outcome.Code != "evicted" {
			e.Fatalf("end: %+v %v %v", j, ok, err)
		}
		if res := e.completeBy("a", "L1", device("d1")); res.Accepted {
			e.Fatal("a result was accepted after the job ended")
		}
		if _, ok, _ := e.s.End(e.ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.CanceledOutcome(), Reason: "again"}); ok {
			e.Fatal("ended twice")
		}
		e.create(cloudJob("b"))
		if j, ok, _ := e.s.End(e.ctx, sitestore.EndInput{JobID: "b", Outcome: protocol.CanceledOutcome(), Reason: "answered a cancel"}); !ok || j.State != sitestore.StateCanceled || j.AwaitingPublish {
			e.Fatalf("end as cancelled: %+v", j)
		}
		if _, ok, _ := e.s.End(e.ctx, sitestore.EndInput{JobID: "nope", Outcome: protocol.CanceledOutcome()}); ok {
			e.Fatal("ended an unknown job")
		}
	}},
}
