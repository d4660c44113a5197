package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/sitestoretest"
	"github.com/byorelay/byorelay/protocol"
)

var generate = []protocol.Capability{{Kind: protocol.KindGenerate, Service: "primary", BackendID: "ollama",
	BackendClass: "http", Model: "m", OfferScope: protocol.AudiencePrivate}}

func createJob(t *testing.T, s *Store, id string, deps ...string) sitestore.Job {
	t.Helper()
	j, err := s.Create(context.Background(), sitestore.CreateInput{ID: id, Kind: protocol.KindGenerate, Owner: "alice",
		SizeClass: "small", DependsOn: deps, Envelope: protocol.SealedEnvelope{Ciphertext: "c", Direction: protocol.DirectionPayload}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func claimOnly(t *testing.T, s *Store, runner string) sitestore.Job {
	t.Helper()
	jobs, err := s.Claim(context.Background(), sitestore.ClaimInput{RunnerID: runner, RunnerOwner: "alice", Capabilities: generate, Max: 1, LeaseMs: 60_000})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim by %s: %v %v", runner, len(jobs), err)
	}
	return jobs[0]
}

func completeOK(s *Store, j sitestore.Job, runner string) error {
	_, err := s.Complete(context.Background(), sitestore.CompleteInput{JobID: j.ID, RunnerID: runner,
		Holder: sitestore.HolderByLease(j.Lease.ID, runner), Outcome: protocol.OKOutcome("done")})
	return err
}

// TestDependencyUnblockRaceAcrossReplicas is the race the dependency rule
// exists for, on DynamoDB Local with one client per replica: C depends on A
// and B; A and B complete at the same moment on two replicas while a third
// replica creates C (in half the rounds C exists before). C must end
// claimable, never blocked forever, and unblocked exactly once: its
// version is 1 if it was created claimable, 2 if one unblock wrote it, and
// anything more would be a second unblock. Then two replicas race to claim
// it and exactly one gets it. Run with -count=10 for the acceptance bar.
func TestDependencyUnblockRaceAcrossReplicas(t *testing.T) {
	table := newTable(t)
	clk := clock.NewManual(sitestoretest.Start)
	r1, r2, r3 := replica(t, table, clk, nil), replica(t, table, clk, nil), replica(t, table, clk, nil)
	const rounds = 25
	for round := range rounds {
		a, b, c := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round), fmt.Sprintf("c%d", round)
		createJob(t, r1, a)
		createJob(t, r1, b)
		ja := claimOnly(t, r1, "runner-1")
		jb := claimOnly(t, r2, "runner-2")
		createdFirst := round%2 == 0
		if createdFirst {
			createJob(t, r3, c, a, b)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		run := func(f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- f()
			}()
		}
		run(func() error { return completeOK(r1, ja, "runner-1") })
		run(func() error { return completeOK(r2, jb, "runner-2") })
		if !createdFirst {
			run(func() error { createJob(t, r3, c, a, b); return nil })
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		st, found, err := r3.readJob(context.Background(), c)
		if err != nil || !found {
			t.Fatalf("round %d: read %s: %v", round, c, err)
		}
		if st.job.ClaimableAt == 0 {
			t.Fatalf("round %d: %s stayed blocked after both dependencies completed ok", round, c)
		}
		if st.ver > 2 {
			t.Fatalf("round %d: %s written %d times: unblocked more than once", round, c, st.ver-1)
		}
		// Two replicas race for it.
		var mu sync.Mutex
		grants := 0
		for _, r := range []*Store{r1, r2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jobs, err := r.Claim(context.Background(), sitestore.ClaimInput{RunnerID: "runner-x" + fmt.Sprint(round), RunnerOwner: "alice", Capabilities: generate, Max: 5, LeaseMs: 60_000})
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				grants += len(jobs)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if grants != 1 {
			t.Fatalf("round %d: %s granted %d times", round, c, grants)
		}
		// Leave nothing claimable for the next round.
		if got, _, _ := r1.Get(context.Background(), c); got.State != sitestore.StateClaimed {
			t.Fatalf("round %d: %s is %s after the claim race", round, c, got.State)
		}
	}
}

// dependentsLost fails the query a completer makes for its dependents, as
// a Lambda that dies right after its completion write would never make it.
// A fault DynamoDB Local cannot produce, injected by a wrapper.
type dependentsLost struct{ ddb.API }

func (d dependentsLost) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if p, ok := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS); ok && in.IndexName == nil && strings.HasPrefix(p.Value, "DEP#") {
		return nil, errors.New("injected: the completer died before telling its dependents")
	}
	return d.API.Query(ctx, in, opts...)
}

// TestSweepFinishesACompleterThatDiedMidway: the
// completion lands with its UNBLOCK marker, the dependents query never
// happens, and the dependent is still unblocked, by the sweep.
func TestSweepFinishesACompleterThatDiedMidway(t *testing.T) {
	table := newTable(t)
	clk := clock.NewManual(sitestoretest.Start)
	healthy := replica(t, table, clk, nil)
	dying := replica(t, table, clk, func(api ddb.API) ddb.API { return dependentsLost{api} })
	createJob(t, healthy, "a")
	createJob(t, healthy, "c", "a")
	ja := claimOnly(t, healthy, "runner-1")
	if err := completeOK(dying, ja, "runner-1"); err == nil {
		t.Fatal("the injected fault did not fire")
	}
	if got, _, _ := healthy.Get(context.Background(), "a"); got.State != sitestore.StateOK {
		t.Fatalf("a is %s; the completion itself must have landed", got.State)
	}
	if got, _, _ := healthy.Get(context.Background(), "c"); got.ClaimableAt != 0 {
		t.Fatal("c was unblocked without anyone telling it (the fault did not cut the path)")
	}
	if _, err := healthy.ExpireDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := healthy.Get(context.Background(), "c"); got.ClaimableAt == 0 {
		t.Fatal("c stayed blocked after the sweep")
	}
	out, err := healthy.db.Query(context.Background(), &dynamodb.QueryInput{TableName: &table, IndexName: aws.String("due"),
		KeyConditionExpression: aws.String("dpk = :p"), ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(shardPK(unblockPK, dueShard("a", healthy.dueShards)))}})
	if err != nil || len(out.Items) != 0 {
		t.Fatalf("unblock markers left: %d %v", len(out.Items), err)
	}
}
