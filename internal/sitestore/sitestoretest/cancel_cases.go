package sitestoretest

import (
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

var cancelCases = []testCase{
	{"cancelling a queued job cancels it at once", func(e *env) {
		e.create(job("a", "alice"))
		j, found, err := e.s.Cancel(e.ctx, "a")
		if err != nil || !found || j.State != sitestore.StateCanceled {
			e.Fatalf("cancel: %+v %v %v", j, found, err)
		}
		if jobs := e.claim("r1", "alice", 1, generate); len(jobs) != 0 {
			e.Fatal("a cancelled job was claimed")
		}
	}},
	{"cancelling a held job asks its holder, by grant, and leaves the state alone", func(e *env) {
		e.create(job("a", "alice"))
		j := e.claimOne("r1", "alice")
		got, _, err := e.s.Cancel(e.ctx, "a")
		if err != nil || got.State != sitestore.StateClaimed {
			e.Fatalf("cancel of a held job: %+v %v", got, err)
		}
		reqs, err := e.s.CancelRequests(e.ctx, "r1")
		if err != nil || len(reqs) != 1 || reqs[0] != (protocol.GrantRef{JobID: "a", LeaseID: j.Lease.ID}) {
			e.Fatalf("cancel requests: %+v %v", reqs, err)
		}
		if other, _ := e.s.CancelRequests(e.ctx, "r2"); len(other) != 0 {
			e.Fatalf("another runner hears of it: %+v", other)
		}
		e.complete(j, "r1", protocol.CanceledOutcome())
		e.wantState("a", sitestore.StateCanceled)
		if after, _ := e.s.CancelRequests(e.ctx, "r1"); len(after) != 0 {
			e.Fatalf("the request outlived the completion: %+v", after)
		}
	}},
	{"cancelling a finished job changes nothing; an unknown one is absent", func(e *env) {
		e.create(job("a", "alice"))
		e.complete(e.claimOne("r1", "alice"), "r1", okOutcome())
		if j, found, err := e.s.Cancel(e.ctx, "a"); err != nil || !found || j.State != sitestore.StateOK {
			e.Fatalf("cancel of a finished job: %+v %v", j, err)
		}
		if _, found, err := e.s.Cancel(e.ctx, "nope"); err != nil || found {
			e.Fatalf("cancel of an unknown job: found=%v err=%v", found, err)
		}
	}},
	{"a watcher hears every write to its job until it unsubscribes, twice safely", func(e *env) {
		e.create(job("a", "alice"))
		heard := make(chan struct{}, 16)
		stop := e.s.Subscribe("a", func() { heard <- struct{}{} })
		j := e.claimOne("r1", "alice")
		e.complete(j, "r1", okOutcome())
		if n := len(heard); n < 2 {
			e.Fatalf("heard %d writes, want at least 2", n)
		}
		stop()
		stop()
		for len(heard) > 0 {
			<-heard
		}
		e.s.Cancel(e.ctx, "a")
		e.create(job("b", "alice"))
		if len(heard) != 0 {
			e.Fatal("heard a write after unsubscribing")
		}
	}},
}
