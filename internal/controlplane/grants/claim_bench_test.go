package grants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakekms"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/dynamo"
	"github.com/byorelay/byorelay/store/memory"
)

// BenchmarkClaimWithGrant is one claim of one queued job through the
// relay with the grant author on, per signer: the seed in memory, and KMS
// (the stand-in, moto serving no Ed25519 keys) with the latency a Sign
// round trip to the regional endpoint adds, which a local server lacks. AWS
// publishes no figure for it; 5 ms and 15 ms bracket it. Over the memory
// store, and over DynamoDB Local (BYORELAY_BENCH_DYNAMO=1 under
// withservices), whose round trips stand for the store's share of a
// deployed claim. docs/performance.md has the command and the ratios.
func BenchmarkClaimWithGrant(b *testing.B) {
	stores := []string{"memory"}
	if os.Getenv("BYORELAY_BENCH_DYNAMO") != "" {
		stores = append(stores, "dynamo")
	}
	for _, st := range stores {
		for _, signer := range []struct {
			name    string
			kms     bool
			latency time.Duration
		}{
			{"seed", false, 0},
			{"kms-0ms", true, 0},
			{"kms-5ms", true, 5 * time.Millisecond},
			{"kms-15ms", true, 15 * time.Millisecond},
		} {
			b.Run(st+"/"+signer.name, func(b *testing.B) {
				var s grants.Signer
				if signer.kms {
					fake := fakekms.Start(b, fakekms.Options{Latency: signer.latency})
					var err error
					if s, err = grants.NewKMSSigner(context.Background(), kms.NewFromConfig(localtest.AWSConfig(fake.URL)), fake.AddKey(b, nil)); err != nil {
						b.Fatal(err)
					}
				} else {
					seed, err := grants.NewSeed()
					if err != nil {
						b.Fatal(err)
					}
					if s, err = grants.NewSeedSigner(seed); err != nil {
						b.Fatal(err)
					}
				}
				benchClaims(b, benchStore(b, st), grants.NewWithSigner(s, grants.Options{}))
			})
		}
	}
}

func benchStore(b *testing.B, name string) store.RoutingStore {
	b.Helper()
	if name == "memory" {
		return memory.New(store.Options{})
	}
	table := localtest.UniqueName("claimbench")
	client := localtest.DynamoClient(b)
	if err := dynamo.CreateTable(context.Background(), client, table); err != nil {
		b.Fatal(err)
	}
	s, err := dynamo.New(dynamo.Config{DB: client, Table: table})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchClaims(b *testing.B, st store.RoutingStore, author *grants.Author) {
	ctx := context.Background()
	site := relaytest.NewSite(b, "site-a")
	daemon := relaytest.NewDaemon(b, "runner-1", "alice")
	f := relaytest.NewFixture().Site(site).Device(daemon).Consent("alice", "site-a").Build()
	// Mapped, so the job is grantable under a law that wants a mapping too.
	f.Consents[0].Mappings = []projection.Mapping{{Purpose: grants.ReservedPurpose, Kind: "llm.generate", Service: "local"}}
	p, err := projection.New(f)
	if err != nil {
		b.Fatal(err)
	}
	r, err := relay.New(relay.Config{Store: st, Projection: relay.NewStaticProjection(p), Logger: slog.New(slog.DiscardHandler),
		ControlPlanePublic: author.Public(), AuthorGrant: author.Grant})
	if err != nil {
		b.Fatal(err)
	}
	claim := protocol.ClaimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: daemon.RunnerID, Max: 1,
		Capabilities: []protocol.Capability{{Kind: "llm.generate", Service: "local", BackendID: "ollama", BackendClass: "http",
			Model: "llama3", OfferScope: "private"}}}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		id := fmt.Sprintf("job-%d", i)
		now := time.Now()
		resp := r.Handle(ctx, site.Request(b, "enqueue", now, protocol.EnqueueRequest{ProtocolVersion: protocol.ProtocolVersion,
			SiteID: site.SiteID, Stub: site.Stub(id, "alice", now.Add(time.Hour).UnixMilli())}))
		if resp.Status != 200 {
			b.Fatalf("enqueue: %d %s", resp.Status, resp.Body)
		}
		req := daemon.Request(b, "claim", time.Now(), claim)
		b.StartTimer()
		resp = r.Handle(ctx, req)
		b.StopTimer()
		var got protocol.ClaimResponse
		if err := json.Unmarshal(resp.Body, &got); resp.Status != 200 || err != nil || len(got.Jobs) != 1 || got.Jobs[0].Grant == nil {
			b.Fatalf("claim: %d %s", resp.Status, resp.Body)
		}
		// Sealed, as a site does: a pair sitting on unsealed grants is
		// offered no more, so the next claim would find nothing.
		deadline := now.Add(time.Hour).UnixMilli()
		resp = r.Handle(ctx, site.Request(b, "payload", time.Now(), protocol.PayloadRequest{ProtocolVersion: protocol.ProtocolVersion,
			SiteID: site.SiteID, JobID: id, Envelope: site.Seal(b, id, "prompt", daemon.Public(), deadline)}))
		if resp.Status != 200 {
			b.Fatalf("payload: %d %s", resp.Status, resp.Body)
		}
		b.StartTimer()
	}
}
