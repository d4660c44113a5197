package dynamo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/protocol"
)

// The sequential model the replica race is checked against: one job's
// grants as sitestore's rules have them. A claim that returns the job takes
// it from free to held under the lease it names; a release or a completion
// under the current lease must succeed and under any other must not; a
// finished job is granted to nobody. A claim that returns nothing is not
// recorded: skipping a job another replica is writing is allowed (SKIP
// LOCKED), handing it out twice is not.

type opKind int

const (
	opClaim opKind = iota
	opRelease
	opComplete
)

type raceIn struct {
	kind  opKind
	job   int
	lease string
}

type raceOut struct {
	ok bool // claim: granted; release: released; complete: accepted
}

type raceState struct {
	holder string
	done   bool
}

func raceModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			for _, op := range h {
				j := op.Input.(raceIn).job
				by[j] = append(by[j], op)
			}
			var out [][]porcupine.Operation
			for _, ops := range by {
				out = append(out, ops)
			}
			return out
		},
		Init: func() any { return raceState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(raceState), input.(raceIn), output.(raceOut)
			switch in.kind {
			case opClaim:
				if s.done || s.holder != "" {
					return false, s
				}
				return true, raceState{holder: in.lease}
			case opRelease:
				holds := !s.done && s.holder == in.lease
				if out.ok != holds {
					return false, s
				}
				if holds {
					return true, raceState{}
				}
				return true, s
			default:
				holds := !s.done && s.holder == in.lease
				if out.ok != holds {
					return false, s
				}
				if holds {
					return true, raceState{done: true, holder: in.lease}
				}
				return true, s
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(raceIn), output.(raceOut)
			return fmt.Sprintf("%v job%d lease=%.8s -> %v", [...]string{"claim", "release", "complete"}[in.kind], in.job, in.lease, out.ok)
		},
	}
}

// TestReplicaClaimRaceIsLinearizable: four replicas, each with its own
// client on DynamoDB Local, claim, release and complete three jobs at
// random, presenting current and stale leases alike; the history must be
// linearizable against the one-job model, so no job is ever granted to two
// holders and no stale lease ever releases or completes. Run with
// -count=10 for the acceptance bar.
func TestReplicaClaimRaceIsLinearizable(t *testing.T) {
	table := newTable(t)
	clk := clock.NewManual(sitestoretest.Start)
	const replicas, jobs, opsEach = 4, 6, 40
	seed := replica(t, table, clk, nil)
	jobIndex := map[string]int{}
	for j := range jobs {
		id := fmt.Sprintf("job%d", j)
		jobIndex[id] = j
		createJob(t, seed, id)
	}
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in raceIn, out raceOut, call, ret int64) {
		mu.Lock()
		defer mu.Unlock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	}
	start := time.Now()
	since := func() int64 { return int64(time.Since(start)) }
	var wg sync.WaitGroup
	for r := range replicas {
		st := replica(t, table, clk, nil)
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		runner := fmt.Sprintf("runner-%d", r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var known []protocol.GrantRef // every lease this replica ever got, stale ones included
			for range opsEach {
				if len(known) == 0 || rng.IntN(3) == 0 {
					call := since()
					got, err := st.Claim(ctx, sitestore.ClaimInput{RunnerID: runner, RunnerOwner: "alice", Capabilities: generate, Max: 1, LeaseMs: 600_000})
					ret := since()
					if err != nil {
						t.Error(err)
						return
					}
					for _, j := range got {
						known = append(known, protocol.GrantRef{JobID: j.ID, LeaseID: j.Lease.ID})
						record(r, raceIn{kind: opClaim, job: jobIndex[j.ID], lease: j.Lease.ID}, raceOut{ok: true}, call, ret)
					}
					continue
				}
				g := known[rng.IntN(len(known))]
				in := raceIn{job: jobIndex[g.JobID], lease: g.LeaseID}
				call := since()
				if rng.IntN(5) != 0 {
					released, err := st.Release(ctx, sitestore.ReleaseInput{RunnerID: runner, Leases: []protocol.GrantRef{g}, Reason: protocol.ReasonBackendDown})
					ret := since()
					if err != nil {
						t.Error(err)
						return
					}
					in.kind = opRelease
					record(r, in, raceOut{ok: len(released) == 1}, call, ret)
					continue
				}
				res, err := st.Complete(ctx, sitestore.CompleteInput{JobID: g.JobID, RunnerID: runner,
					Holder: sitestore.HolderByLease(g.LeaseID, runner), Outcome: protocol.OKOutcome("x")})
				ret := since()
				if err != nil {
					t.Error(err)
					return
				}
				in.kind = opComplete
				record(r, in, raceOut{ok: res.Accepted}, call, ret)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res, _ := porcupine.CheckOperationsVerbose(raceModel(), history, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("the history of %d operations is not linearizable (%v)", len(history), res)
	}
	t.Logf("%d operations across %d replicas, linearizable", len(history), replicas)
}
