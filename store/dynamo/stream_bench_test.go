package dynamo

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/ddb"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
	"github.com/byorelay/byorelay/store/storetest"
)

// BenchmarkStreamCapacity is what streaming 1,000 characters costs in
// DynamoDB capacity, by frame size (how much text a daemon coalesces into
// one frame): the appends (one TransactWriteItems each, plus the header
// and lease reads that decide it) and one reader replaying the whole
// stream. Frames carry real ciphertext (internal/stream/seal). Compare with
// BenchmarkLifecycleCapacity's "complete" for the same text not streamed.
//
//	go test -run '^$' -bench StreamCapacity -benchtime 5x ./store/dynamo/
func BenchmarkStreamCapacity(b *testing.B) {
	ctx := context.Background()
	device, err := protocol.GenerateKeys()
	if err != nil {
		b.Fatal(err)
	}
	siteKeys, err := protocol.GenerateKeys()
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("a streamed answer, ", 60)[:1000]
	for _, frameChars := range []int{50, 150, 500} {
		b.Run(fmt.Sprintf("frame=%d", frameChars), func(b *testing.B) {
			meter := &ddb.Meter{}
			clk := clock.NewManual(storetest.Start)
			s, err := New(Config{DB: localtest.DynamoClient(b), Table: newTable(b), Options: store.Options{Clock: clk}, Meter: meter})
			if err != nil {
				b.Fatal(err)
			}
			deadline := storetest.Start.UnixMilli() + 3_600_000
			var appendCap, readCap ddb.Capacity
			frames := 0
			for i := range b.N {
				site, id := fmt.Sprintf("site-%06d", i), fmt.Sprintf("job-%06d", i)
				if _, err := s.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: site, Stub: protocol.JobStub{
					ID: id, Kind: "llm.generate", Owner: "alice", Site: "K", Audience: "private", SizeClass: "small", Streaming: true, DeadlineAt: deadline,
				}}); err != nil {
					b.Fatal(err)
				}
				granted, err := s.Claim(ctx, store.ClaimInput{RunnerID: "runner", Owner: "alice", Streams: true,
					Device: device.Public(), Routes: []store.Route{{SiteID: site, Owner: "alice"}}, Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 60_000})
				if err != nil || len(granted) != 1 {
					b.Fatalf("claim: %v %v", granted, err)
				}
				lease := granted[0].Lease.ID
				if _, err := s.Seal(ctx, store.SealInput{SiteID: site, JobID: id, Envelope: protocol.SealedEnvelope{Ciphertext: "p", RecipientKeyID: "d", SenderKeyID: "s", Direction: "payload", DeadlineAt: deadline}}); err != nil {
					b.Fatal(err)
				}
				key, err := seal.DeviceKey(device, siteKeys.Public(), seal.Context{JobID: id, LeaseID: lease, DeviceKeyID: device.KeyID(), SiteKeyID: siteKeys.KeyID()})
				if err != nil {
					b.Fatal(err)
				}
				sealer := seal.NewSealer(key)
				meter.Reset()
				appendOne := func(f seal.Frame) {
					out, err := s.AppendFrame(ctx, store.AppendFrameInput{JobID: id, RunnerID: "runner", LeaseID: lease,
						Frame: store.StreamFrame{N: f.N, From: f.From, Seq: f.Seq, Kind: f.Kind, CT: f.CT}})
					if err != nil || out.Refused != "" {
						b.Fatalf("append %d: %v %s", f.N, err, out.Refused)
					}
					frames++
				}
				for at := 0; at < len(text); at += frameChars {
					f, err := sealer.Chunk(text[at:min(at+frameChars, len(text))])
					if err != nil {
						b.Fatal(err)
					}
					appendOne(f)
				}
				end, _ := sealer.End("complete", "")
				appendOne(end)
				c := meter.Total()
				appendCap.ReadUnits += c.ReadUnits
				appendCap.WriteUnits += c.WriteUnits
				appendCap.Calls += c.Calls

				meter.Reset()
				if _, _, err := s.StreamOf(ctx, site, id); err != nil {
					b.Fatal(err)
				}
				page, err := s.ReadFrames(ctx, site, id, lease, 0, 0)
				if err != nil || len(page.Frames) == 0 {
					b.Fatalf("read: %v", err)
				}
				c = meter.Total()
				readCap.ReadUnits += c.ReadUnits
				readCap.Calls += c.Calls
			}
			n := float64(b.N)
			b.ReportMetric(appendCap.WriteUnits/n, "WCU/1000chars")
			b.ReportMetric(appendCap.ReadUnits/n, "RCU-append/1000chars")
			b.ReportMetric(float64(appendCap.Calls)/n, "req-append/1000chars")
			b.ReportMetric(readCap.ReadUnits/n, "RCU-replay/1000chars")
			b.ReportMetric(float64(frames)/n, "frames/1000chars")
		})
	}
}
