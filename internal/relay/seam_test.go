package relay_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/protocol"
)

// The seam between a site and the relay at a job's deadline, with the Go
// site SDK against a real relay on each store and one clock for both: a
// result the relay accepted ends at the site as that result, never as
// "expired". The chaos smoke saw both ways to break it on a loaded
// machine (two results accepted, both jobs ended "expired").

// seam is a site SDK client talking to w's relay over HTTP, with one job
// published, claimed by w's daemon, sealed and fetched: what is left is the
// device's result.
type seam struct {
	w     *world
	site  *site.Client
	lease string
	env   protocol.SealedEnvelope
	dl    int64
}

// aheadClock is another host's clock: the relay's plus ahead.
type aheadClock struct {
	relay *clock.Manual
	ahead time.Duration
}

func (c aheadClock) Now() time.Time { return c.relay.Now().Add(c.ahead) }

// newSeam is the seam with the site's clock ahead of the relay's by
// siteAhead (a byorelay replica's clock is DynamoDB's to within a second;
// the site's is its host's).
func newSeam(t *testing.T, f storeFactory, siteAhead time.Duration) *seam {
	t.Helper()
	w := newWorld(t, f)
	srv := httptest.NewServer(w.relay.HTTPHandler())
	t.Cleanup(srv.Close)
	s, err := site.New(site.Config{RelayURL: srv.URL, SiteID: "site-a", Keys: w.site.Keys,
		Clock: aheadClock{relay: w.clock, ahead: siteAhead}, MaxAttempts: 1, HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	dl := w.nowMs() + 60_000
	stub := protocol.JobStub{ID: "j1", Kind: protocol.KindGenerate, Owner: "alice", Audience: "private", DeadlineAt: dl}
	if _, err := s.Publish(w.ctx, stub, protocol.GeneratePayload("hello")); err != nil {
		t.Fatal(err)
	}
	claimed := decode[protocol.ClaimResponse](t, w.daemonCall(w.daemon, "claim", protocol.ClaimRequest{
		ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, Max: 1,
		Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "local", BackendID: "ollama",
			BackendClass: "http", Model: "m", OfferScope: "private"}}}))
	if len(claimed.Jobs) != 1 {
		t.Fatalf("claim granted %d jobs", len(claimed.Jobs))
	}
	lease := claimed.Jobs[0].Lease.ID
	if rep, err := s.Pump(w.ctx); err != nil || len(rep.Sealed) != 1 {
		t.Fatalf("pump = %+v, %v; want the payload sealed", rep, err)
	}
	fetched := decode[protocol.FetchResponse](t, w.daemonCall(w.daemon, "fetch",
		protocol.FetchRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: "j1", LeaseID: lease}))
	prompt, err := protocol.Open(fetched.Envelope, w.daemon.Keys, w.site.Public().Identity, protocol.ExpectedEnvelope{
		JobID: "j1", SenderKeyID: w.site.KeyID(), RecipientKeyID: w.daemon.Keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(protocol.SealedOutcome{Outcome: protocol.OKOutcome("echo: " + prompt),
		Ran: protocol.RunMetadata{Model: "m", BackendClass: "http", DurationMs: 3}})
	env := w.daemon.SealResult(t, "j1", string(out), w.site.Public(), w.nowMs()+protocol.EnvelopeMaxAgeMs)
	return &seam{w: w, site: s, lease: lease, env: env, dl: dl}
}

// post is the device's result, and whether the relay accepted it.
func (s *seam) post(t *testing.T) bool {
	t.Helper()
	resp := s.w.daemonCall(s.w.daemon, "result", protocol.ResultRequest{ProtocolVersion: "2",
		RunnerID: s.w.daemon.RunnerID, JobID: "j1", LeaseID: s.lease, Envelope: s.env, Disposition: "ok"})
	if resp.Status != 200 {
		return false
	}
	return decode[protocol.ResultResponse](t, resp).Accepted
}

// fate pumps until the job ends and returns its fate.
func (s *seam) fate(t *testing.T) site.Fate {
	t.Helper()
	for range 3 {
		rep, err := s.site.Pump(s.w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rep.Ended {
			return e.Fate
		}
		s.w.advance(protocol.ResultGraceMs)
	}
	t.Fatal("the job never ended at the site")
	return ""
}

// A result accepted in the last instant before the deadline, after the
// site's latest results poll: the site's next poll comes after the
// deadline. It must still be delivered.
func TestAResultJustBeforeTheDeadlineReachesALatePoll(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		s := newSeam(t, f, 0)
		s.w.advance(s.dl - s.w.nowMs() - 1)
		if _, err := s.site.Pump(s.w.ctx); err != nil { // the site's last poll before the deadline
			t.Fatal(err)
		}
		if !s.post(t) {
			t.Fatal("the relay refused a result 1 ms before the deadline")
		}
		s.w.advance(2) // the deadline passes before the site polls again
		if _, err := s.w.relay.Sweep(s.w.ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.fate(t); got != site.FateVerified {
			t.Fatalf("the relay accepted the result before the deadline; the site ended the job %s", got)
		}
	})
}

// The same with the site's clock 2 s ahead of the relay's: its poll sent
// at the deadline by its clock reaches the relay 2 s before it, and the
// result is accepted after that poll was read.
func TestAResultInTimeReachesASiteWhoseClockIsAhead(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		s := newSeam(t, f, 2*time.Second)
		s.w.advance(s.dl - s.w.nowMs() - 2_000)
		if rep, err := s.site.Pump(s.w.ctx); err != nil || len(rep.Ended) != 0 { // at the deadline by the site's clock
			t.Fatalf("pump at the site's deadline = %+v, %v", rep, err)
		}
		s.w.advance(1_999)
		if !s.post(t) {
			t.Fatal("the relay refused a result 1 ms before its deadline")
		}
		if got := s.fate(t); got != site.FateVerified {
			t.Fatalf("the relay accepted the result before its deadline; the site ended the job %s", got)
		}
	})
}

// A result posted after the deadline, before any sweep has reached the
// job: the relay must not accept what it will never deliver.
func TestALateResultIsRefusedNotAcceptedAndLost(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		s := newSeam(t, f, 0)
		s.w.advance(s.dl - s.w.nowMs())
		accepted := s.post(t)
		got := s.fate(t)
		if accepted && got != site.FateVerified {
			t.Fatalf("the relay accepted a result at the deadline; the site ended the job %s", got)
		}
		if got != site.FateExpired {
			t.Fatalf("fate %s, want expired", got)
		}
	})
}
