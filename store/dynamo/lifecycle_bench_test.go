package dynamo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// BenchmarkLifecycleCapacity shows the read and write capacity each step of
// one small job's life consumes on DynamoDB Local: enqueue, claim, seal,
// takePayload, one lease renewal (a heartbeat's share), complete, the
// site's finished listing, and the end of its life (the sweep after its
// deadline and the result grace, which deletes it).
//
//	go test -run '^$' -bench LifecycleCapacity -benchtime 20x ./store/dynamo/
//
// DynamoDB Local reports 0 for a query that finds nothing (the service
// bills at least 0.5 RCU), so the requests figure is reported beside the
// units: the claim's in-line sweep and its empty sticky partition are such
// queries.
func BenchmarkLifecycleCapacity(b *testing.B) {
	ctx := context.Background()
	meter := &ddb.Meter{}
	clk := clock.NewManual(storetest.Start)
	s, err := New(Config{DB: localtest.DynamoClient(b), Table: newTable(b), Options: store.Options{Clock: clk}, Meter: meter})
	if err != nil {
		b.Fatal(err)
	}
	const life = 3_600_000
	claim := store.ClaimInput{
		RunnerID: "runner", Owner: "alice",
		Device: protocol.PublicIdentity{Identity: "id-runner", Encryption: "enc-runner", EncryptionSig: "sig-runner"},
		Kinds:  []string{"llm.generate"},
		Max:    1, LeaseMs: 60_000,
	}

	steps := []string{"enqueue", "claim", "seal", "take", "renew", "complete", "finished", "end"}
	used := map[string]ddb.Capacity{}
	measure := func(step string, f func() error) {
		meter.Reset()
		if err := f(); err != nil {
			b.Fatalf("%s: %v", step, err)
		}
		c := meter.Total()
		u := used[step]
		u.ReadUnits += c.ReadUnits
		u.WriteUnits += c.WriteUnits
		u.Calls += c.Calls
		used[step] = u
	}

	b.ResetTimer()
	for i := range b.N {
		// A site per job, so the finished listing is one job's, as it is
		// for a site that collects its results.
		site, id := fmt.Sprintf("site-%06d", i), fmt.Sprintf("job-%06d", i)
		claim.Routes = []store.Route{{SiteID: site, Owner: "alice"}}
		deadline := clk.Now().UnixMilli() + life
		// A small job: a few hundred bytes of ciphertext each way.
		payload := protocol.SealedEnvelope{Ciphertext: strings.Repeat("p", 400), RecipientKeyID: "device", SenderKeyID: "site", Direction: "payload", DeadlineAt: deadline}
		result := protocol.SealedEnvelope{Ciphertext: strings.Repeat("r", 400), RecipientKeyID: "site", SenderKeyID: "device", Direction: "result", DeadlineAt: deadline}
		var grant store.Claimed
		measure("enqueue", func() error {
			_, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: site, Stub: protocol.JobStub{
				ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", DeadlineAt: deadline,
			}})
			return err
		})
		measure("claim", func() error {
			granted, err := s.Claim(ctx, claim)
			if err == nil && (len(granted) != 1 || granted[0].ID != id) {
				err = fmt.Errorf("granted %v, want %s", granted, id)
			}
			if err == nil {
				grant = granted[0]
			}
			return err
		})
		measure("seal", func() error {
			r, err := s.Seal(ctx, store.SealInput{SiteID: site, JobID: id, Envelope: payload})
			if err == nil && r.Refused != "" {
				err = fmt.Errorf("refused %s", r.Refused)
			}
			return err
		})
		holder := store.HolderInput{JobID: id, RunnerID: "runner", LeaseID: grant.Lease.ID}
		measure("take", func() error {
			r, err := s.TakePayload(ctx, holder)
			if err == nil && r.Envelope == nil {
				err = fmt.Errorf("refused %s", r.Refused)
			}
			return err
		})
		measure("renew", func() error {
			r, err := s.RenewLeases(ctx, store.RenewInput{RunnerID: "runner", LeaseMs: 60_000, Leases: []protocol.GrantRef{{JobID: id, LeaseID: grant.Lease.ID}}})
			if err == nil && len(r.Renewed) != 1 {
				err = fmt.Errorf("not renewed: %+v", r)
			}
			return err
		})
		measure("complete", func() error {
			r, err := s.Complete(ctx, store.CompleteInput{JobID: id, RunnerID: "runner", LeaseID: grant.Lease.ID, Envelope: result, Disposition: store.DispositionOK})
			if err == nil && !r.Accepted {
				err = fmt.Errorf("not accepted: %+v", r)
			}
			return err
		})
		measure("finished", func() error {
			jobs, err := s.Finished(ctx, site, 0)
			if err == nil && len(jobs) != 1 {
				err = fmt.Errorf("%d finished, want 1", len(jobs))
			}
			return err
		})
		// The end of a finished job is its deadline plus the grace a
		// collect may still list its result for.
		clk.Advance((life + store.ResultGraceMs) * time.Millisecond)
		measure("end", func() error {
			_, err := s.Sweep(ctx)
			return err
		})
		if _, ok, err := s.Job(ctx, site, id); err != nil || ok {
			b.Fatalf("%s outlived its deadline (%v)", id, err)
		}
	}
	b.StopTimer()
	var total ddb.Capacity
	for _, step := range steps {
		u := used[step]
		b.ReportMetric(u.ReadUnits/float64(b.N), "RCU/"+step)
		b.ReportMetric(u.WriteUnits/float64(b.N), "WCU/"+step)
		b.ReportMetric(float64(u.Calls)/float64(b.N), "req/"+step)
		total.ReadUnits += u.ReadUnits
		total.WriteUnits += u.WriteUnits
		total.Calls += u.Calls
	}
	b.ReportMetric(total.ReadUnits/float64(b.N), "RCU/job")
	b.ReportMetric(total.WriteUnits/float64(b.N), "WCU/job")
	b.ReportMetric(float64(total.Calls)/float64(b.N), "req/job")
}
