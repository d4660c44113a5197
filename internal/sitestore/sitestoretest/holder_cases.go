package sitestoretest

import (
	"reflect"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

// heldJobs makes one job held in each way a job can be held: "adopted" by
// a relay's lease (Adopt), "sealed" to a device under a relay's lease
// (SealTo), "direct" by this site's runner r1, and "queued" held by nobody.
func (e *env) heldJobs() map[string]sitestore.Job {
	e.Helper()
	e.create(cloudJob("adopted"))
	if _, ok, err := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "adopted", LeaseID: "relay-lease", ExpiresAt: e.now() + 5_000}); !ok || err != nil {
		e.Fatalf("adopt: %v %v", ok, err)
	}
	e.create(cloudJob("sealed"))
	if _, ok := e.sealTo("sealed", "relay-lease-2", device("d")); !ok {
		e.Fatal("seal")
	}
	e.create(job("direct", "alice"))
	e.claimOne("r1", "alice")
	e.create(cloudJob("queued"))
	out := map[string]sitestore.Job{}
	for _, id := range []string{"adopted", "sealed", "direct", "queued"} {
		out[id] = e.get(id)
	}
	return out
}

// refusedUnchanged completes every job in jobs with holder and asserts each
// was refused plainly and reads back exactly as it stood.
func (e *env) refusedUnchanged(name string, jobs map[string]sitestore.Job, runnerID string, holder sitestore.Holder) {
	e.Helper()
	for id, before := range jobs {
		res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: id, RunnerID: runnerID, Holder: holder,
			Outcome: protocol.OKOutcome("forged"), Provenance: sitestore.Provenance{RunnerID: runnerID}})
		if err != nil {
			e.Fatalf("%s on %s: %v", name, id, err)
		}
		if res.Accepted || res.Duplicate {
			e.Errorf("%s completed %s: %+v", name, id, res)
		}
		if after := e.get(id); !reflect.DeepEqual(after, before) {
			e.Errorf("%s changed %s:\n before %+v\n after  %+v", name, id, before, after)
		}
	}
}

var holderCases = []testCase{
	{"a holder that names nothing completes no job: not a relay's lease, not a sealed job, not a direct grant", func(e *env) {
		jobs := e.heldJobs()
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
			e.refusedUnchanged(h.name, jobs, "", h.holder)
			e.refusedUnchanged(h.name+" (asked by r1)", jobs, "r1", h.holder)
		}
	}},
	{"a grant's lease id without the runner it was granted to completes nothing", func(e *env) {
		jobs := e.heldJobs()
		e.refusedUnchanged("the direct grant's lease, no runner", jobs, "", sitestore.HolderByLease(jobs["direct"].Lease.ID, ""))
		e.refusedUnchanged("the adopted lease, no runner", jobs, "", sitestore.HolderByLease("relay-lease", ""))
		e.refusedUnchanged("the sealed job's lease, no runner", jobs, "", sitestore.HolderByLease("relay-lease-2", ""))
	}},
	{"a direct-lane holder cannot complete a job a relay leased, even naming its lease", func(e *env) {
		jobs := e.heldJobs()
		e.refusedUnchanged("r1 with the adopted lease", jobs, "r1", sitestore.HolderByLease("relay-lease", "r1"))
		e.refusedUnchanged("r1 with the sealed job's lease", jobs, "r1", sitestore.HolderByLease("relay-lease-2", "r1"))
		e.refusedUnchanged("r1 by runner", map[string]sitestore.Job{"adopted": jobs["adopted"], "sealed": jobs["sealed"]}, "r1", sitestore.HolderByRunner("r1"))
	}},
	{"a runner holder completes its own grant and nobody else's", func(e *env) {
		jobs := e.heldJobs()
		e.refusedUnchanged("r2 by runner", jobs, "r2", sitestore.HolderByRunner("r2"))
		res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: "direct", RunnerID: "r1", Holder: sitestore.HolderByRunner("r1"),
			Outcome: okOutcome(), Provenance: sitestore.Provenance{RunnerID: "r1"}})
		if err != nil || !res.Accepted {
			e.Fatalf("r1 by runner: %+v %v", res, err)
		}
		if got := e.get("direct"); got.State != sitestore.StateOK || got.CompletedByLeaseID != jobs["direct"].Lease.ID {
			e.Fatalf("stored: %+v", got)
		}
	}},
	{"a finished job answers duplicate to nobody who names no device", func(e *env) {
		e.create(cloudJob("a"))
		if _, ok := e.sealTo("a", "relay-lease", device("d")); !ok {
			e.Fatal("seal")
		}
		// Finished by the cloud lane with a provenance naming no runner.
		res, err := e.s.Complete(e.ctx, sitestore.CompleteInput{JobID: "a", Holder: sitestore.HolderByDevice(device("d"), "relay-lease"),
			Outcome: okOutcome(), Provenance: sitestore.Provenance{Audience: "team", Untrusted: true}})
		if err != nil || !res.Accepted {
			e.Fatalf("the device's result: %+v %v", res, err)
		}
		e.refusedUnchanged("no runner, the finishing lease", map[string]sitestore.Job{"a": e.get("a")}, "", sitestore.HolderByLease("relay-lease", "r1"))
	}},
	{"a lease or device that names nothing is never adopted or sealed", func(e *env) {
		e.create(cloudJob("a"))
		before := e.get("a")
		if _, ok, err := e.s.Adopt(e.ctx, sitestore.AdoptInput{JobID: "a", LeaseID: "", ExpiresAt: e.now() + 5_000}); ok || err != nil {
			e.Errorf("adopted a lease with no id: %v %v", ok, err)
		}
		if _, ok := e.sealTo("a", "", device("d")); ok {
			e.Error("sealed under a lease with no id")
		}
		if _, ok := e.sealTo("a", "relay-lease", protocol.PublicIdentity{}); ok {
			e.Error("sealed to a device with no identity")
		}
		if after := e.get("a"); !reflect.DeepEqual(after, before) {
			e.Errorf("refused adopt and seals changed the job:\n before %+v\n after  %+v", before, after)
		}
	}},
	{"an empty runner id holds no lease: a relay's lease is not renewed, released, listed or cancelled by it", func(e *env) {
		jobs := e.heldJobs()
		for _, id := range []string{"adopted", "sealed"} {
			if _, _, err := e.s.Cancel(e.ctx, id); err != nil {
				e.Fatal(err)
			}
		}
		jobs["adopted"], jobs["sealed"] = e.get("adopted"), e.get("sealed")
		if got, err := e.s.CancelRequests(e.ctx, ""); err != nil || len(got) != 0 {
			e.Errorf("cancel requests for no runner: %v %v", got, err)
		}
		if got, err := e.s.ClaimedBy(e.ctx, ""); err != nil || len(got) != 0 {
			e.Errorf("jobs claimed by no runner: %v %v", ids(got), err)
		}
		relayLeases := []protocol.GrantRef{{JobID: "adopted", LeaseID: "relay-lease"}, {JobID: "sealed", LeaseID: "relay-lease-2"}}
		renewed, err := e.s.RenewLeases(e.ctx, sitestore.RenewInput{RunnerID: "", Leases: relayLeases, LeaseMs: 60_000})
		if err != nil || len(renewed.Renewed) != 0 || len(renewed.Lost) != 2 {
			e.Errorf("renew by no runner: %+v %v", renewed, err)
		}
		released, err := e.s.Release(e.ctx, sitestore.ReleaseInput{RunnerID: "", Leases: relayLeases, Reason: protocol.ReasonRefused})
		if err != nil || len(released) != 0 {
			e.Errorf("release by no runner: %v %v", released, err)
		}
		for id, before := range jobs {
			if after := e.get(id); !reflect.DeepEqual(after, before) {
				e.Errorf("%s changed:\n before %+v\n after  %+v", id, before, after)
			}
		}
	}},
}
