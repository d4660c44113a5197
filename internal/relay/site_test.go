package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

func enqueueBody(s *relaytest.Site, stub protocol.JobStub) protocol.EnqueueRequest {
	return protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: s.SiteID, Stub: stub}
}

func TestSiteAuthentication(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		other := relaytest.NewSite(t, "site-b")
		w.project(w.base().Site(other).Consent("alice", "site-a"))
		stub := w.site.Stub("job-1", "alice", w.deadline())
		signed := func() relay.Request { return w.site.Request(t, "enqueue", w.now(), enqueueBody(w.site, stub)) }
		cases := []struct {
			name   string
			req    func() relay.Request
			status int
			body   string
		}{
			{"unsigned", func() relay.Request {
				r := signed()
				r.Header.Del(protocol.HeaderIssuedAt)
				return r
			}, 401, errBody("unauthorized", "this request is not signed")},
			{"an unregistered site", func() relay.Request {
				stranger := relaytest.NewSite(t, "site-z")
				return stranger.Request(t, "enqueue", w.now(), enqueueBody(stranger, stub))
			}, 401, errBody("unauthorized", "this site is not registered")},
			{"a key that is not the site's", func() relay.Request {
				return relaytest.SignedSiteRequest(t, other.Keys, "site-a", "enqueue", w.now(), enqueueBody(w.site, stub))
			}, 401, errBody("unauthorized", "signature check failed")},
			{"a daemon's signature in the site headers", func() relay.Request {
				return relaytest.SignedSiteRequest(t, w.daemon.Keys, "runner-1", "enqueue", w.now(), enqueueBody(w.site, stub))
			}, 401, errBody("unauthorized", "this site is not registered")},
			{"a daemon-plane header", func() relay.Request {
				r := signed()
				r.Header.Set(protocol.HeaderRunner, r.Header.Get(protocol.HeaderSite))
				r.Header.Del(protocol.HeaderSite)
				return r
			}, 401, errBody("unauthorized", "this request is not signed")},
			{"a pending signature presented on results", func() relay.Request {
				r := w.site.Request(t, "pending", w.now(), nil)
				r.Path = "/relay/site/results"
				return r
			}, 401, errBody("unauthorized", "signature check failed")},
			{"a stale timestamp is clock skew, not a bad key", func() relay.Request {
				return w.site.Request(t, "enqueue", w.now().Add(10*time.Minute), enqueueBody(w.site, stub))
			}, 401, `{"error":"clock-skew","message":"this request's timestamp is too far from the server's clock; check the machine's time and try again","serverTime":` + relaytest.Ms(w.now()) + `,"maxSkewMs":120000}`},
			{"a body that fails the schema", func() relay.Request {
				return w.site.Request(t, "enqueue", w.now(), `{"protocolVersion":"2","siteId":"site-a"}`)
			}, 400, errBody("bad-request", "request failed schema validation")},
			{"a body naming another site", func() relay.Request {
				return w.site.Request(t, "enqueue", w.now(), enqueueBody(other, stub))
			}, 403, errBody("forbidden", "that is not your site")},
			{"a read naming another site in its query", func() relay.Request {
				r := w.site.Request(t, "pending", w.now(), nil)
				r.RawQuery = "siteId=site-b&protocolVersion=2"
				return r
			}, 403, errBody("forbidden", "that is not your site")},
			{"a read with an empty siteId", func() relay.Request {
				r := w.site.Request(t, "results", w.now(), nil)
				r.RawQuery = "protocolVersion=2"
				return r
			}, 400, errBody("bad-request", "request failed schema validation")},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				expect(t, w.do(c.req()), c.status, c.body)
			})
		}
		if jobs, _ := w.store.Jobs(w.ctx); len(jobs) != 0 {
			t.Fatalf("a refused request stored %+v", jobs)
		}
		for _, endpoint := range []string{"pending", "results"} {
			r := w.site.Request(t, endpoint, w.now(), nil)
			r.Header.Del(protocol.HeaderSignature)
			expect(t, w.do(r), 401, errBody("unauthorized", "this request is not signed"))
		}
	})
}

func TestEnqueue(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("a stub must name the signing site's current key", func(t *testing.T) {
			w := newWorld(t, f)
			other := relaytest.NewSite(t, "site-b")
			w.project(w.base().Site(other).Consent("alice", "site-a"))
			for _, site := range []string{other.KeyID(), "BYOLLM-0000-0000-0000-0000-0000-0000"} {
				stub := w.site.Stub("job-1", "alice", w.deadline())
				stub.Site = site
				expect(t, w.siteCall(w.site, "enqueue", enqueueBody(w.site, stub)), 403, errBody("forbidden", "that stub does not name the site that signed it"))
			}
			if jobs, _ := w.store.Jobs(w.ctx); len(jobs) != 0 {
				t.Fatalf("stored %+v", jobs)
			}
			// The other site's own correct stub is accepted: any registered site routes.
			w.enqueue(other, "job-b", "alice")
		})
		t.Run("a republish answers the job as it stands and moves nothing", func(t *testing.T) {
			w := newWorld(t, f)
			stub := w.enqueue(w.site, "job-1", "alice")
			job := w.claim(w.daemon, 1)[0]
			changed := stub
			changed.Kind = "llm.chat"
			expect(t, w.siteCall(w.site, "enqueue", enqueueBody(w.site, changed)), 200, `{"jobId":"job-1","state":"awaiting-payload"}`)
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.ClaimedBy.LeaseID != job.Lease.ID || stored.Stub.Kind != "llm.generate" {
				t.Fatalf("job %+v", stored)
			}
		})
		t.Run("the same id from two sites is two jobs", func(t *testing.T) {
			w := newWorld(t, f)
			other := relaytest.NewSite(t, "site-b")
			w.project(w.base().Site(other).Consent("alice", "site-a"))
			w.enqueue(w.site, "job-1", "alice")
			w.enqueue(other, "job-1", "alice")
		})
		t.Run("satisfiable verdicts", func(t *testing.T) {
			var verdict relay.Verdict
			var failure error
			var asked relay.SatisfiableQuery
			w := newWorld(t, f, func(c *relay.Config) {
				c.Satisfiable = func(_ context.Context, q relay.SatisfiableQuery) (relay.Verdict, error) {
					asked = q
					return verdict, failure
				}
			})
			stub := w.site.Stub("job-1", "alice", w.deadline())
			stub.Purpose = "summarise"
			cases := []struct {
				verdict relay.Verdict
				err     error
				status  int
				body    string
			}{
				{relay.VerdictNotDeclared, nil, 409, errBody("purpose-not-declared", "this site does not declare summarise — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes")},
				{relay.VerdictUnmapped, nil, 409, errBody("slot-unsatisfiable", "nobody has chosen what answers this yet")},
				{relay.VerdictWaiting, nil, 409, errBody("slot-waiting", "nothing can answer this right now — try again later")},
				{"", errors.New("pool exhausted"), 503, errBody("server-error", "we could not check this just now — try again shortly")},
			}
			for _, c := range cases {
				verdict, failure = c.verdict, c.err
				expect(t, w.siteCall(w.site, "enqueue", enqueueBody(w.site, stub)), c.status, c.body)
			}
			// The projection the enqueue read, which holds the site.
			if _, ok := asked.Projection.SiteFor("site-a"); !ok {
				t.Fatalf("asked with a projection that does not hold the site: %+v", asked)
			}
			asked.Projection = nil
			if asked != (relay.SatisfiableQuery{SiteID: "site-a", Owner: "alice", Purpose: "summarise", Kind: "llm.generate"}) {
				t.Fatalf("asked %+v", asked)
			}
			if jobs, _ := w.store.Jobs(w.ctx); len(jobs) != 0 {
				t.Fatalf("a refused enqueue stored %+v", jobs)
			}
			if strings.Contains(w.logs.String(), "pool exhausted") == false {
				t.Fatal("the failure reason was not logged")
			}
			stub.Purpose = ""
			verdict, failure = relay.VerdictNotDeclared, nil
			expect(t, w.siteCall(w.site, "enqueue", enqueueBody(w.site, stub)), 409, errBody("purpose-not-declared", "this site does not declare that purpose — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes"))
			verdict = relay.VerdictOK
			expect(t, w.siteCall(w.site, "enqueue", enqueueBody(w.site, stub)), 200, `{"jobId":"job-1","state":"queued"}`)
		})
	})
}

func TestPayload(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		other := relaytest.NewSite(t, "site-b")
		w.project(w.base().Site(other).Consent("alice", "site-a"))
		w.enqueue(w.site, "job-1", "alice")
		env := w.site.Seal(t, "job-1", "prompt", w.daemon.Public(), w.deadline())
		body := protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: env}

		t.Run("a job nobody claimed is not awaiting its payload", func(t *testing.T) {
			expect(t, w.siteCall(w.site, "payload", body), 409, errBody("too-late", "job is queued, not awaiting payload"))
		})
		t.Run("an unknown job, or another site's, is not found", func(t *testing.T) {
			unknown := body
			unknown.JobID = "nope"
			expect(t, w.siteCall(w.site, "payload", unknown), 404, errBody("not-found", "unknown job"))
			theirs := body
			theirs.SiteID = "site-b"
			expect(t, w.siteCall(other, "payload", theirs), 404, errBody("not-found", "unknown job"))
		})
		w.claim(w.daemon, 1)
		// Checked before any store call; six megabytes are built once, on
		// the memory run.
		sizeCheck := func(name string, test func(t *testing.T)) {
			if f.name == "memory" {
				t.Run(name, test)
			}
		}
		sizeCheck("an envelope over the ceiling is refused before it is held", func(t *testing.T) {
			big := body
			big.Envelope.Ciphertext = strings.Repeat("A", protocol.MaxEnvelopeBytes)
			n := protocol.EnvelopeBytes(big.Envelope)
			expect(t, w.siteCall(w.site, "payload", big), 400, errBody("bad-request", protocol.TooLargeMessage(n, protocol.MaxEnvelopeBytes)+" Every plan has the same ceiling."))
			stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
			if stored.State != "awaiting-payload" || stored.Payload != nil {
				t.Fatalf("job %+v", stored)
			}
		})
		t.Run("sealed once; a second seal is too late", func(t *testing.T) {
			expect(t, w.siteCall(w.site, "payload", body), 200, `{"jobId":"job-1","state":"ready"}`)
			expect(t, w.siteCall(w.site, "payload", body), 409, errBody("too-late", "job is ready, not awaiting payload"))
		})
	})
}

func TestCancel(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		other := relaytest.NewSite(t, "site-b")
		w.project(w.base().Site(other).Consent("alice", "site-a"))
		w.enqueue(w.site, "job-1", "alice")
		cancel := func(s *relaytest.Site, id string) relay.Response {
			return w.siteCall(s, "cancel", protocol.CancelRequest{ProtocolVersion: "2", SiteID: s.SiteID, JobID: id})
		}
		expect(t, cancel(other, "job-1"), 200, `{"cancelled":false}`)
		expect(t, cancel(w.site, "nope"), 200, `{"cancelled":false}`)
		stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
		if stored.Cancelled {
			t.Fatal("another site cancelled the job")
		}
		expect(t, cancel(w.site, "job-1"), 200, `{"cancelled":true}`)
		expect(t, cancel(w.site, "job-1"), 200, `{"cancelled":true}`)
		// A job cancelled before any claim is never claimed.
		if got := w.claim(w.daemon, 1); len(got) != 0 {
			t.Fatalf("claimed a cancelled job: %+v", got)
		}
	})
}

func TestPending(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		other := relaytest.NewSite(t, "site-b")
		w.project(w.base().Site(other).Consent("alice", "site-a").Consent("alice", "site-b"))
		w.enqueue(w.site, "job-1", "alice")
		w.enqueue(other, "job-b", "alice")
		expect(t, w.siteCall(w.site, "pending", nil), 200, `{"jobs":[]}`)
		claimed := w.claim(w.daemon, 4)
		if len(claimed) != 2 {
			t.Fatalf("claimed %+v", claimed)
		}
		var mine protocol.ClaimedStub
		for _, c := range claimed {
			if c.ID == "job-1" {
				mine = c
			}
		}
		want := `{"jobs":[{"jobId":"job-1","device":` + encodeJS(t, w.daemon.Public()) + `,"runnerId":"runner-1","leaseId":"` + mine.Lease.ID +
			`","awaitingUntil":` + relaytest.Ms(w.now().Add(10*time.Second)) + `,"leaseExpiresAt":` + relaytest.Ms(w.now().Add(time.Minute)) + `}]}`
		expect(t, w.siteCall(w.site, "pending", nil), 200, want)

		// It sweeps first: once the awaiting window has passed the claim is
		// gone and the job requeued, so the site is not asked to seal it.
		w.advance(10_000)
		expect(t, w.siteCall(w.site, "pending", nil), 200, `{"jobs":[]}`)
		stored, _, _ := w.store.Job(w.ctx, "site-a", "job-1")
		if stored.State != "queued" || stored.SealAttempts != 1 {
			t.Fatalf("job %+v", stored)
		}
		// And a late seal is refused.
		env := w.site.Seal(t, "job-1", "prompt", w.daemon.Public(), w.deadline())
		expect(t, w.siteCall(w.site, "payload", protocol.PayloadRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "job-1", Envelope: env}), 409, errBody("too-late", "job is queued, not awaiting payload"))
	})
}

func TestKeyRotation(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		oldKeys := w.site.Keys
		rotated := w.site.Rotate(t, w.nowMs()+60_000)
		w.project(relaytest.NewFixture().SiteRecord(rotated).Device(w.daemon).Consent("alice", "site-a"))
		cancelBody := protocol.CancelRequest{ProtocolVersion: "2", SiteID: "site-a", JobID: "x"}
		oldSigned := func() relay.Request {
			return relaytest.SignedSiteRequest(t, oldKeys, "site-a", "cancel", w.now(), cancelBody)
		}
		expect(t, w.do(oldSigned()), 200, `{"cancelled":false}`)
		expect(t, w.siteCall(w.site, "cancel", cancelBody), 200, `{"cancelled":false}`)

		// The stub must name the current key even when the old one signs.
		stale := w.site.Stub("job-1", "alice", w.deadline())
		stale.Site = oldKeys.KeyID()
		expect(t, w.do(relaytest.SignedSiteRequest(t, oldKeys, "site-a", "enqueue", w.now(), enqueueBody(w.site, stale))), 403,
			errBody("forbidden", "that stub does not name the site that signed it"))
		current := w.site.Stub("job-1", "alice", w.deadline())
		expect(t, w.do(relaytest.SignedSiteRequest(t, oldKeys, "site-a", "enqueue", w.now(), enqueueBody(w.site, current))), 200, `{"jobId":"job-1","state":"queued"}`)

		// A key outside the chain is refused inside the window.
		outsider := relaytest.NewSite(t, "site-a")
		expect(t, w.siteCall(outsider, "cancel", cancelBody), 401, errBody("unauthorized", "signature check failed"))

		w.advance(60_000)
		expect(t, w.do(oldSigned()), 401, errBody("unauthorized", "signature check failed"))
		expect(t, w.siteCall(w.site, "cancel", cancelBody), 200, `{"cancelled":false}`)
	})
}
