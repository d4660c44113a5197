package sitestoretest

import (
	"testing"

	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/protocol"
)

func cancelCases() []testCase {
	return []testCase{
		{"cancelling a queued job cancels it at once", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j, found, err := e.Store.Cancel(ctx, "a")
			if err != nil || !found || j.State != sitestore.StateCanceled {
				t.Fatalf("cancel: %+v %v %v", j, found, err)
			}
			if jobs := e.claim(t, "r1", "alice", 1, generate); len(jobs) != 0 {
				t.Fatal("a cancelled job was claimed")
			}
		}},
		{"cancelling a held job asks its holder, by grant, and leaves the state alone", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			j := e.claimOne(t, "r1", "alice")
			got, _, err := e.Store.Cancel(ctx, "a")
			if err != nil || got.State != sitestore.StateClaimed {
				t.Fatalf("cancel of a held job: %+v %v", got, err)
			}
			reqs, err := e.Store.CancelRequests(ctx, "r1")
			if err != nil || len(reqs) != 1 || reqs[0] != (protocol.GrantRef{JobID: "a", LeaseID: j.Lease.ID}) {
				t.Fatalf("cancel requests: %+v %v", reqs, err)
			}
			if other, _ := e.Store.CancelRequests(ctx, "r2"); len(other) != 0 {
				t.Fatalf("another runner hears of it: %+v", other)
			}
			e.complete(t, j, "r1", protocol.CanceledOutcome())
			wantState(t, e, "a", sitestore.StateCanceled)
			if after, _ := e.Store.CancelRequests(ctx, "r1"); len(after) != 0 {
				t.Fatalf("the request outlived the completion: %+v", after)
			}
		}},
		{"cancelling a finished job changes nothing; an unknown one is absent", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			e.complete(t, e.claimOne(t, "r1", "alice"), "r1", okOutcome())
			if j, found, err := e.Store.Cancel(ctx, "a"); err != nil || !found || j.State != sitestore.StateOK {
				t.Fatalf("cancel of a finished job: %+v %v", j, err)
			}
			if _, found, err := e.Store.Cancel(ctx, "nope"); err != nil || found {
				t.Fatalf("cancel of an unknown job: found=%v err=%v", found, err)
			}
		}},
		{"a watcher hears every write to its job until it unsubscribes, twice safely", func(t *testing.T, e Env) {
			e.create(t, job("a", "alice"))
			heard := make(chan struct{}, 16)
			stop := e.Store.Subscribe("a", func() { heard <- struct{}{} })
			j := e.claimOne(t, "r1", "alice")
			e.complete(t, j, "r1", okOutcome())
			if n := len(heard); n < 2 {
				t.Fatalf("heard %d writes, want at least 2", n)
			}
			stop()
			stop()
			for len(heard) > 0 {
				<-heard
			}
			e.Store.Cancel(ctx, "a")
			e.create(t, job("b", "alice"))
			if len(heard) != 0 {
				t.Fatal("heard a write after unsubscribing")
			}
		}},
	}
}
