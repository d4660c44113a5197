package sitestoretest

import (
	"reflect"
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// heldJobs makes one job held in each way a job can be held: "adopted" by
// a relay's lease (Adopt), "sealed" to a device under a relay's lease
// (SealTo), "direct" by this site's runner r1, and "queued" held by nobody.
func heldJobs(t *testing.T, e Env) map[string]sitestore.Job {
	t.Helper()
	e.create(t, cloudJob("adopted"))
	if _, ok, err := e.Store.Adopt(ctx, sitestore.AdoptInput{JobID: "adopted", LeaseID: "relay-lease", ExpiresAt: e.now() + 5_000}); !ok || err != nil {
		t.Fatalf("adopt: %v %v", ok, err)
	}
	e.create(t, cloudJob("sealed"))
	if _, ok := e.sealTo(t, "sealed", "relay-lease-2", device("d")); !ok {
		t.Fatal("seal")
	}
	e.create(t, job("direct", "alice"))
	e.claimOne(t, "r1", "alice")
	e.create(t, cloudJob("queued"))
	out := map[string]sitestore.Job{}
	for _, id := range []string{"adopted", "sealed", "direct", "queued"} {
		out[id] = e.get(t, id)
	}
	return out
}

// refusedUnchanged completes every job in jobs with holder and asserts each
// was refused plainly and reads back exactly as it stood.
func refusedUnchanged(t *testing.T, e Env, name string, jobs map[string]sitestore.Job, runnerID string, holder sitestore.Holder) {
	t.Helper()
	for id, before := range jobs {
		res, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: id, RunnerID: runnerID, Holder: holder,
			Outcome: protocol.OKOutcome("forged"), Provenance: sitestore.Provenance{RunnerID: runnerID}})
		if err != nil {
			t.Fatalf("%s on %s: %v", name, id, err)
		}
		if res.Accepted || res.Duplicate {
			t.Errorf("%s completed %s: %+v", name, id, res)
		}
		if after := e.get(t, id); !reflect.DeepEqual(after, before) {
			t.Errorf("%s changed %s:\n before %+v\n after  %+v", name, id, before, after)
		}
	}
}

func holderCases() []testCase {
	return []testCase{
		{"a holder that names nothing completes no job: not a relay's lease, not a sealed job, not a direct grant", func(t *testing.T, e Env) {
			jobs := heldJobs(t, e)
			nothing := []struct {
				name   string
				holder sitestore.Holder
			}{
				{"the zero holder", sitestore.Holder{}},
				{"a lease holder with no lease and no runner", sitestore.HolderByLease("", "")},
				{"a lease holder with no lease", sitestore.HolderByLease("", "r1")},
				{"a runner holder with no runner", sitestore.HolderByRunner("")},
				{"a device holder with no device", sitestore.HolderByDevice(protocol.PublicIdentity{}, "")},
			}
			for _, h := range nothing {
				refusedUnchanged(t, e, h.name, jobs, "", h.holder)
				refusedUnchanged(t, e, h.name+" (asked by r1)", jobs, "r1", h.holder)
			}
		}},
		{"a grant's lease id without the runner it was granted to completes nothing", func(t *testing.T, e Env) {
			jobs := heldJobs(t, e)
			refusedUnchanged(t, e, "the direct grant's lease, no runner", jobs, "", sitestore.HolderByLease(jobs["direct"].Lease.ID, ""))
			refusedUnchanged(t, e, "the adopted lease, no runner", jobs, "", sitestore.HolderByLease("relay-lease", ""))
			refusedUnchanged(t, e, "the sealed job's lease, no runner", jobs, "", sitestore.HolderByLease("relay-lease-2", ""))
		}},
		{"a direct-lane holder cannot complete a job a relay leased, even naming its lease", func(t *testing.T, e Env) {
			jobs := heldJobs(t, e)
			refusedUnchanged(t, e, "r1 with the adopted lease", jobs, "r1", sitestore.HolderByLease("relay-lease", "r1"))
			refusedUnchanged(t, e, "r1 with the sealed job's lease", jobs, "r1", sitestore.HolderByLease("relay-lease-2", "r1"))
			refusedUnchanged(t, e, "r1 by runner", map[string]sitestore.Job{"adopted": jobs["adopted"], "sealed": jobs["sealed"]}, "r1", sitestore.HolderByRunner("r1"))
		}},
		{"a runner holder completes its own grant and nobody else's", func(t *testing.T, e Env) {
			jobs := heldJobs(t, e)
			refusedUnchanged(t, e, "r2 by runner", jobs, "r2", sitestore.HolderByRunner("r2"))
			res, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: "direct", RunnerID: "r1", Holder: sitestore.HolderByRunner("r1"),
				Outcome: okOutcome(), Provenance: sitestore.Provenance{RunnerID: "r1"}})
			if err != nil || !res.Accepted {
				t.Fatalf("r1 by runner: %+v %v", res, err)
			}
			if got := e.get(t, "direct"); got.State != sitestore.StateOK || got.CompletedByLeaseID != jobs["direct"].Lease.ID {
				t.Fatalf("stored: %+v", got)
			}
		}},
		{"a finished job answers duplicate to nobody who names no device", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			if _, ok := e.sealTo(t, "a", "relay-lease", device("d")); !ok {
				t.Fatal("seal")
			}
			// Finished by the cloud lane with a provenance naming no runner.
			res, err := e.Store.Complete(ctx, sitestore.CompleteInput{JobID: "a", Holder: sitestore.HolderByDevice(device("d"), "relay-lease"),
				Outcome: okOutcome(), Provenance: sitestore.Provenance{Audience: "team", Untrusted: true}})
			if err != nil || !res.Accepted {
				t.Fatalf("the device's result: %+v %v", res, err)
			}
			refusedUnchanged(t, e, "no runner, the finishing lease", map[string]sitestore.Job{"a": e.get(t, "a")}, "", sitestore.HolderByLease("relay-lease", "r1"))
		}},
		{"a lease or device that names nothing is never adopted or sealed", func(t *testing.T, e Env) {
			e.create(t, cloudJob("a"))
			before := e.get(t, "a")
			if _, ok, err := e.Store.Adopt(ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "", ExpiresAt: e.now() + 5_000}); ok || err != nil {
				t.Errorf("adopted a lease with no id: %v %v", ok, err)
			}
			if _, ok := e.sealTo(t, "a", "", device("d")); ok {
				t.Error("sealed under a lease with no id")
			}
			if _, ok := e.sealTo(t, "a", "relay-lease", protocol.PublicIdentity{}); ok {
				t.Error("sealed to a device with no identity")
			}
			if after := e.get(t, "a"); !reflect.DeepEqual(after, before) {
				t.Errorf("refused adopt and seals changed the job:\n before %+v\n after  %+v", before, after)
			}
		}},
		{"an empty runner id holds no lease: a relay's lease is not renewed, released, listed or cancelled by it", func(t *testing.T, e Env) {
			jobs := heldJobs(t, e)
			for _, id := range []string{"adopted", "sealed"} {
				if _, _, err := e.Store.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			jobs["adopted"], jobs["sealed"] = e.get(t, "adopted"), e.get(t, "sealed")
			if got, err := e.Store.CancelRequests(ctx, ""); err != nil || len(got) != 0 {
				t.Errorf("cancel requests for no runner: %v %v", got, err)
			}
			if got, err := e.Store.ClaimedBy(ctx, ""); err != nil || len(got) != 0 {
				t.Errorf("jobs claimed by no runner: %v %v", ids(got), err)
			}
			relayLeases := []protocol.GrantRef{{JobID: "adopted", LeaseID: "relay-lease"}, {JobID: "sealed", LeaseID: "relay-lease-2"}}
			renewed, err := e.Store.RenewLeases(ctx, sitestore.RenewInput{RunnerID: "", Leases: relayLeases, LeaseMs: 60_000})
			if err != nil || len(renewed.Renewed) != 0 || len(renewed.Lost) != 2 {
				t.Errorf("renew by no runner: %+v %v", renewed, err)
			}
			released, err := e.Store.Release(ctx, sitestore.ReleaseInput{RunnerID: "", Leases: relayLeases, Reason: protocol.ReasonRefused})
			if err != nil || len(released) != 0 {
				t.Errorf("release by no runner: %v %v", released, err)
			}
			for id, before := range jobs {
				if after := e.get(t, id); !reflect.DeepEqual(after, before) {
					t.Errorf("%s changed:\n before %+v\n after  %+v", id, before, after)
				}
			}
		}},
	}
}
