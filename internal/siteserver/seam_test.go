package siteserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/protocol"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// dynamoSiteStore is a site store on a fresh DynamoDB Local table, on
// clock.
func dynamoSiteStore(t *testing.T, clk *clock.Manual) sitestore.Store {
	t.Helper()
	db := localtest.DynamoClient(t)
	table := localtest.UniqueName("site")
	if err := sitedynamo.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	st, err := sitedynamo.New(sitedynamo.Config{DB: db, Table: table, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eachSiteStore runs f on a cloud world over each site store: the memory
// store and DynamoDB Local, on the world's one manual clock.
func eachSiteStore(t *testing.T, f func(t *testing.T, w *cloudWorld)) {
	t.Run("memory", func(t *testing.T) {
		f(t, newCloudWorld(t))
	})
	t.Run("dynamo", func(t *testing.T) {
		f(t, newCloudWorldOn(t, func(clk *clock.Manual) sitestore.Store { return dynamoSiteStore(t, clk) }))
	})
}

// The seam at a job's deadline on the cloud lane (internal/relay/seam_test.go is the
// Go site SDK's): the relay accepts a result at deadline - 1 ms, after the
// site's latest results poll; the site's next poll, and its store's sweep,
// come after the deadline. The job must end ok with that result, never
// expired. A job sealed to the same device that never answers still
// expires, once a poll sent protocol.ExpiryMarginMs past its deadline came
// back without it.
func TestACloudResultJustBeforeTheDeadlineEndsTheJob(t *testing.T) {
	eachSiteStore(t, func(t *testing.T, w *cloudWorld) {
		s := w.start(nil)
		for _, id := range []string{"j1", "silent"} {
			// A minute, as internal/relay/seam_test.go's: the relay's lease outlives it.
			if _, err := s.Enqueue(w.ctx, siteserver.EnqueueInput{ID: id, Kind: protocol.KindGenerate,
				Payload: json.RawMessage(`{"prompt":"the last instant"}`), Owner: "alice", TTLMs: 60_000}); err != nil {
				t.Fatal(err)
			}
		}
		dl := w.job("j1").DeadlineAt
		if w.job("silent").DeadlineAt != dl {
			t.Fatal("the two jobs have different deadlines")
		}
		// The device claims both by hand, so nothing runs but this test.
		claim := protocol.ClaimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: w.device.RunnerID, Max: 2,
			Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "local", BackendID: "ollama",
				BackendClass: "http", Model: "m", OfferScope: "private"}}}
		claimed := w.relay.Handle(w.ctx, w.device.Request(t, "claim", w.clock.Now(), claim))
		var grants protocol.ClaimResponse
		if err := json.Unmarshal(claimed.Body, &grants); claimed.Status != 200 || err != nil || len(grants.Jobs) != 2 {
			t.Fatalf("claim: %d %s", claimed.Status, claimed.Body)
		}
		lease := map[string]string{}
		for _, g := range grants.Jobs {
			lease[g.ID] = g.Lease.ID
		}
		if rep, err := s.Pump(w.ctx); err != nil || len(rep.Sealed) != 2 {
			t.Fatalf("pump = %+v, %v; want both payloads sealed", rep, err)
		}
		fetched := w.relay.Handle(w.ctx, w.device.Request(t, "fetch", w.clock.Now(), protocol.FetchRequest{
			ProtocolVersion: protocol.ProtocolVersion, RunnerID: w.device.RunnerID, JobID: "j1", LeaseID: lease["j1"]}))
		var payload protocol.FetchResponse
		if err := json.Unmarshal(fetched.Body, &payload); fetched.Status != 200 || err != nil {
			t.Fatalf("fetch: %d %s", fetched.Status, fetched.Body)
		}
		prompt, err := protocol.Open(payload.Envelope, w.device.Keys, w.keys.Public().Identity, protocol.ExpectedEnvelope{
			JobID: "j1", SenderKeyID: w.keys.KeyID(), RecipientKeyID: w.device.Keys.KeyID(), Direction: protocol.DirectionPayload,
		})
		if err != nil {
			t.Fatal(err)
		}
		text := "echo: " + prompt
		out, _ := json.Marshal(protocol.SealedOutcome{Outcome: protocol.OKOutcome(text), Ran: protocol.RunMetadata{Model: "m", BackendClass: "http", DurationMs: 3}})

		w.clock.Advance(time.Duration(dl-w.clock.Now().UnixMilli()-1) * time.Millisecond)
		if rep, err := s.Pump(w.ctx); err != nil || len(rep.Ended) != 0 { // the site's last poll before the deadline
			t.Fatalf("pump at deadline - 1 ms = %+v, %v", rep, err)
		}
		env := w.device.SealResult(t, "j1", string(out), w.keys.Public(), w.clock.Now().UnixMilli()+protocol.EnvelopeMaxAgeMs)
		posted := w.relay.Handle(w.ctx, w.device.Request(t, "result", w.clock.Now(), protocol.ResultRequest{
			ProtocolVersion: protocol.ProtocolVersion, RunnerID: w.device.RunnerID, JobID: "j1", LeaseID: lease["j1"],
			Envelope: env, Disposition: "ok"}))
		if posted.Status != 200 || !strings.Contains(string(posted.Body), `"accepted":true`) {
			t.Fatalf("the relay refused a result 1 ms before the deadline: %d %s", posted.Status, posted.Body)
		}

		// The deadline passes; both sweeps run before the site polls again.
		w.clock.Advance(2 * time.Millisecond)
		if _, err := w.relay.Sweep(w.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sweep(w.ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Pump(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := fatesOf(rep); len(got) != 1 || got["j1"] != site.FateVerified {
			t.Fatalf("the first poll past the deadline ended %v (j1 %s in the store); want j1 verified and silent waiting", got, w.job("j1").State)
		}
		j := w.job("j1")
		if siteserver.FateOf(j) != site.FateVerified || j.State != sitestore.StateOK || w.answer("j1") != text {
			t.Fatalf("the relay accepted the result before the deadline; the store holds %s %+v", siteserver.FateOf(j), j)
		}

		// The silent job: not ended by a poll sent within the margin, ended
		// expired by the first one sent at the margin.
		w.clock.Advance(time.Duration(dl+protocol.ExpiryMarginMs-1-w.clock.Now().UnixMilli()) * time.Millisecond)
		if _, err := s.Sweep(w.ctx); err != nil {
			t.Fatal(err)
		}
		if rep, err := s.Pump(w.ctx); err != nil || len(rep.Ended) != 0 {
			t.Fatalf("pump within the margin = %+v, %v", rep, err)
		}
		w.clock.Advance(time.Millisecond)
		rep, err = s.Pump(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := fatesOf(rep); len(got) != 1 || got["silent"] != site.FateExpired {
			t.Fatalf("a poll sent at the margin ended %v; want silent expired", got)
		}
		if j := w.job("silent"); j.State != sitestore.StateExpired {
			t.Fatalf("silent: %+v", j)
		}
	})
}

func fatesOf(rep site.Report) map[string]site.Fate {
	out := map[string]site.Fate{}
	for _, e := range rep.Ended {
		out[e.JobID] = e.Fate
	}
	return out
}
