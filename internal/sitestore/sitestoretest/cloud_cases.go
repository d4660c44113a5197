package sitestoretest

import (
	"testing"

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

func (e Env) sealTo(t *testing.T, id, lease string, d protocol.PublicIdentity) (sitestore.Job, bool) {
	t.Helper()
	j, ok, err := e.Store.SealTo(ctx, sitestore.SealToInput{JobID: id, LeaseID: lease, ExpiresAt: e.now() + 5_000, Device: d})
	if err != nil {
		t.Fatalf("seal %s: %v", id, err)
	}
	return j, ok
}

func (e Env) completeBy(t *testing.T, id, lease string, d protocol.PublicIdentity) sitestore.CompleteResult {
	t.Helper()
	res, err := e.Store.Complete(ctx, sitestore.CompleteInput{
		JobID: id, RunnerID: "relay-runner", Holder: sitestore.HolderByDevice(d, lease),
		Outcome: okOutcome(), Provenance: sitestore.Provenance{Audience: "team", RunnerID: "relay-runner", Untrusted: true},
	})
	if err != nil {
		t.Fatalf("complete %s: %v", id, err)
	}
	return res
}

func (e Env) unpublished(t *testing.T) []string {
	t.Helper()
	jobs, err := e.Store.Unpublished(ctx)
	if err != nil {
		t.Fatalf("unpublished: %v", err)
	}
	return ids(jobs)
}

func cloudCases() []testCase {
	return []testCase{
		{"a cloud job is listed unpublished until the relay accepts its stub, and only then", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			e.advance(1)
			e.create(t, cloudJob("b"))
			e.create(t, job("direct", "alice"))
			if got := e.unpublished(t); !equal(got, []string{"a", "b"}) {
				t.Fatalf("unpublished: %v, want [a b]", got)
			}
			if j, ok, err := e.Store.MarkPublished(ctx, "a"); err != nil || !ok || j.AwaitingPublish {
				t.Fatalf("mark published: %+v %v %v", j, ok, err)
			}
			if _, ok, _ := e.Store.MarkPublished(ctx, "a"); ok {
				t.Fatal("marked published twice")
			}
			if _, ok, _ := e.Store.MarkPublished(ctx, "nope"); ok {
				t.Fatal("marked an unknown job published")
			}
			if got := e.unpublished(t); !equal(got, []string{"b"}) {
				t.Fatalf("unpublished: %v, want [b]", got)
			}
			e.advance(60_000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.unpublished(t); len(got) != 0 {
				t.Fatalf("an expired job is still to publish: %v", got)
			}
		}},
		{"the stream grant is the latest seal's lease and device, read back by any reader of the store", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			if got := e.get(t, "a"); got.StreamGrant != nil {
				t.Fatalf("an unsealed job has a stream grant: %+v", got.StreamGrant)
			}
			want := func(lease string, d protocol.PublicIdentity) {
				t.Helper()
				got := e.get(t, "a")
				if got.StreamGrant == nil || got.StreamGrant.LeaseID != lease || got.StreamGrant.Device != d {
					t.Fatalf("stream grant: %+v, want %s %+v", got.StreamGrant, lease, d)
				}
			}
			e.sealTo(t, "a", "L1", device("d1"))
			want("L1", device("d1"))
			// A re-claim under a new lease re-keys the stream, even by the
			// same device.
			e.sealTo(t, "a", "L2", device("d1"))
			want("L2", device("d1"))
			e.sealTo(t, "a", "L3", device("d2"))
			want("L3", device("d2"))
			// A refused seal (the job is cancelled) leaves the grant as it was.
			if _, _, err := e.Store.Cancel(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.sealTo(t, "a", "L4", device("d3")); ok {
				t.Fatal("sealed a cancelled job")
			}
			want("L3", device("d2"))
		}},
		{"the stream grant outlives the result, so the relay's frames stay readable", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			e.sealTo(t, "a", "L1", device("d1"))
			if res := e.completeBy(t, "a", "L1", device("d1")); !res.Accepted {
				t.Fatalf("complete: %+v", res)
			}
			if got := e.get(t, "a"); got.StreamGrant == nil || got.StreamGrant.LeaseID != "L1" || got.StreamGrant.Device != device("d1") {
				t.Fatalf("stream grant after the result: %+v", got.StreamGrant)
			}
		}},
		{"sealing adopts the relay's lease and records the device before the payload leaves", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			j, ok := e.sealTo(t, "a", "L1", device("d1"))
			if !ok || !j.Adopted() || j.Lease.ID != "L1" || j.State != sitestore.StateClaimed || len(j.SealedTo) != 1 {
				t.Fatalf("seal: %+v %v", j, ok)
			}
			// The same device re-claims after the awaiting window lapsed:
			// a new lease, still one device.
			j, ok = e.sealTo(t, "a", "L2", device("d1"))
			if !ok || j.Lease.ID != "L2" || len(j.SealedTo) != 1 {
				t.Fatalf("reseal: %+v %v", j, ok)
			}
			j, _ = e.sealTo(t, "a", "L3", device("d2"))
			if got := e.get(t, "a"); len(got.SealedTo) != 2 || got.SealedTo[1] != device("d2") || got.Lease.ID != "L3" {
				t.Fatalf("stored: %+v (returned %+v)", got, j)
			}
			// An adopted lease never lapses: only the deadline ends it (the
			// relay, not this site, decides when its lease lapses),
			// and for a job sealed to a device not before the relay's grace.
			e.advance(30_000)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateClaimed)
			e.advance(30_000 + protocol.ResultGraceMs)
			if _, err := e.Store.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
			wantState(t, e, "a", sitestore.StateExpired)
		}},
		{"a job sealed to a device outlives its deadline until the pump's cut or the relay's grace", func(t *testing.T, e Env) {
			dl := Start.UnixMilli() + 60_000
			for _, id := range []string{"done", "cut", "grace", "unsealed"} {
				in := cloudJob(id)
				if id == "grace" {
					in.DeadlineAt, in.TTLMs = dl+1_000, 61_000
				}
				e.create(t, in)
				if id != "unsealed" {
					e.sealTo(t, id, "L1", device("d1"))
				}
			}
			e.advance(60_000) // at the deadline
			expired := func(before int64) []string {
				t.Helper()
				changed, err := e.Store.ExpireDueBefore(ctx, before)
				if err != nil {
					t.Fatal(err)
				}
				return ids(changed)
			}
			if got := expired(0); !equal(got, []string{"unsealed"}) {
				t.Fatalf("expired at the deadline: %v, want only the job never sealed", got)
			}
			if j, ok := e.sealTo(t, "done", "L2", device("d2")); ok || j.State != sitestore.StateClaimed {
				t.Fatalf("sealed past the deadline: %+v", j)
			}
			if j, _, err := e.Store.Refresh(ctx, "done"); err != nil || j.State != sitestore.StateClaimed {
				t.Fatalf("refresh at the deadline: %+v %v", j, err)
			}
			// The result the relay accepted in the deadline's last instant.
			if res := e.completeBy(t, "done", "L1", device("d1")); !res.Accepted || res.Job.State != sitestore.StateOK {
				t.Fatalf("a result past the deadline, within the grace: %+v", res)
			}
			if got := expired(dl - 1); len(got) != 0 {
				t.Fatalf("expired by a cut before the deadline: %v", got)
			}
			// A cut past the clock is the clock: never before the deadline.
			if got := expired(dl + 30_000); !equal(got, []string{"cut"}) {
				t.Fatalf("expired by a cut at the deadline: %v, want [cut]", got)
			}
			e.advance(1_000 + protocol.ResultGraceMs - 1)
			if got := expired(0); len(got) != 0 {
				t.Fatalf("expired within the grace: %v", got)
			}
			e.advance(1)
			if got := expired(0); !equal(got, []string{"grace"}) {
				t.Fatalf("expired once the grace passed: %v, want [grace]", got)
			}
			wantState(t, e, "done", sitestore.StateOK)
		}},
		{"nothing is sealed for a finished, expired, cancelled or unknown job", func(t *testing.T, e Env) {
			e.create(t, cloudJob("done"))
			e.sealTo(t, "done", "L1", device("d1"))
			e.completeBy(t, "done", "L1", device("d1"))
			e.create(t, cloudJob("cancelled"))
			if _, _, err := e.Store.Cancel(ctx, "cancelled"); err != nil {
				t.Fatal(err)
			}
			e.create(t, cloudJob("asked"))
			e.sealTo(t, "asked", "L1", device("d1"))
			if _, _, err := e.Store.Cancel(ctx, "asked"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"done", "cancelled", "asked", "nope"} {
				if _, ok := e.sealTo(t, id, "L9", device("d9")); ok {
					t.Fatalf("sealed %s", id)
				}
			}
			e.create(t, cloudJob("late"))
			e.advance(60_000)
			if j, ok := e.sealTo(t, "late", "L1", device("d1")); ok || j.State != sitestore.StateExpired {
				t.Fatalf("sealed a job past its deadline: %+v", j)
			}
		}},
		{"a result is accepted once, from a device the payload was sealed to, under any lease", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			e.sealTo(t, "a", "L1", device("d1"))
			if res := e.completeBy(t, "a", "L1", device("stranger")); res.Accepted {
				t.Fatal("accepted a result from a device never sealed to")
			}
			// The seal landed on a newer lease the site never read.
			res := e.completeBy(t, "a", "L2", device("d1"))
			if !res.Accepted || res.Job.State != sitestore.StateOK || res.Job.CompletedByLeaseID != "L2" || res.Job.Lease != nil {
				t.Fatalf("complete: %+v", res)
			}
			if again := e.completeBy(t, "a", "L2", device("d1")); again.Accepted {
				t.Fatal("accepted a result twice")
			}
			if _, ok, _ := e.Store.End(ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "x", false), Reason: "x"}); ok {
				t.Fatal("ended a finished job again")
			}
			wantState(t, e, "a", sitestore.StateOK)
		}},
		{"an eviction or a refused result ends a live job terminally with its reason, once", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			e.sealTo(t, "a", "L1", device("d1"))
			j, ok, err := e.Store.End(ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.FailedOutcome("evicted", "unsealed three times", false), Reason: "evicted"})
			if err != nil || !ok || j.State != sitestore.StateError || j.EndReason != "evicted" || j.Lease != nil || j.Outcome.Code != "evicted" {
				t.Fatalf("end: %+v %v %v", j, ok, err)
			}
			if res := e.completeBy(t, "a", "L1", device("d1")); res.Accepted {
				t.Fatal("a result was accepted after the job ended")
			}
			if _, ok, _ := e.Store.End(ctx, sitestore.EndInput{JobID: "a", Outcome: protocol.CanceledOutcome(), Reason: "again"}); ok {
				t.Fatal("ended twice")
			}
			e.create(t, cloudJob("b"))
			if j, ok, _ := e.Store.End(ctx, sitestore.EndInput{JobID: "b", Outcome: protocol.CanceledOutcome(), Reason: "answered a cancel"}); !ok || j.State != sitestore.StateCanceled || j.AwaitingPublish {
				t.Fatalf("end as cancelled: %+v", j)
			}
			if _, ok, _ := e.Store.End(ctx, sitestore.EndInput{JobID: "nope", Outcome: protocol.CanceledOutcome()}); ok {
				t.Fatal("ended an unknown job")
			}
		}},
	}
}
