package relay_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// padded is prefix filled out with 'x' to exactly n bytes.
func padded(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix))
}

// tooLongBody is the refusal of a field over its bound.
func tooLongBody(name string, max int) string {
	return errBody(protocol.CodeBadRequest, name+" is longer than this relay accepts (at most "+strconv.Itoa(max)+" bytes)")
}

// capabilitiesOfSize is a one-row matrix whose JSON, together with
// extra bytes of withheld JSON, is exactly n bytes: the measure the relay
// bounds (what the store writes).
func capabilitiesOfSize(t *testing.T, n, extra int) []protocol.Capability {
	t.Helper()
	caps := capabilities("llm.generate")
	base, err := json.Marshal(caps)
	if err != nil {
		t.Fatal(err)
	}
	caps[0].Model = strings.Repeat("m", n-extra-len(base)+len(caps[0].Model))
	got, _ := json.Marshal(caps)
	if len(got)+extra != n {
		t.Fatalf("capabilities are %d bytes, want %d", len(got)+extra, n)
	}
	return caps
}

func refsOf(n int, prefix string) []protocol.GrantRef {
	refs := make([]protocol.GrantRef, n)
	for i := range refs {
		refs[i] = protocol.GrantRef{JobID: prefix + strconv.Itoa(i), LeaseID: "lease-" + strconv.Itoa(i)}
	}
	return refs
}

// Every identifier that becomes part of a table key or is stored is
// bounded, and each bound is exercised at length-1, length and length+1 on
// every endpoint that reads it: at and under the bound the request gets
// the answer it would get anyway (never a 5xx: on DynamoDB Local this is
// the proof that a key at the bound fits), over it a 400 that names the
// field and the bound, or a 401 for the runner header, before any store
// call and with nothing changed.
func TestEveryIdentifierBoundAtLengthAndEitherSide(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		// An envelope the result endpoint will parse; its content is not
		// what these cases are about.
		envelope := w.daemon.SealResult(t, "j", "out", w.site.Public(), w.deadline())
		enqueue := func(stub protocol.JobStub) relay.Response {
			return w.siteCall(w.site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: w.site.SiteID, Stub: stub})
		}
		cases := []struct {
			name  string
			max   int
			field string // as the refusal names it
			// call sends the request with the bounded value at length n
			// (prefix keeps values of different cases apart).
			call func(n int, prefix string) relay.Response
			// under is the status at and below the bound.
			under int
		}{
			{"enqueue stub.id", store.MaxJobIDBytes, "stub.id", func(n int, p string) relay.Response {
				return enqueue(w.site.Stub(padded(p, n), "alice", w.deadline()))
			}, 200},
			{"enqueue stub.owner", store.MaxOwnerBytes, "stub.owner", func(n int, p string) relay.Response {
				return enqueue(w.site.Stub(p+"job", padded(p, n), w.deadline()))
			}, 200},
			{"enqueue stub.purpose", store.MaxPurposeBytes, "stub.purpose", func(n int, p string) relay.Response {
				stub := w.site.Stub(p+"job", "alice", w.deadline())
				stub.Purpose = padded(p, n)
				return enqueue(stub)
			}, 200},
			{"payload jobId", store.MaxJobIDBytes, "jobId", func(n int, p string) relay.Response {
				return w.siteCall(w.site, "payload", protocol.PayloadRequest{ProtocolVersion: "2", SiteID: w.site.SiteID,
					JobID: padded(p, n), Envelope: w.site.Seal(t, "j", "in", w.daemon.Public(), w.deadline())})
			}, 404},
			{"cancel jobId", store.MaxJobIDBytes, "jobId", func(n int, p string) relay.Response {
				return w.siteCall(w.site, "cancel", protocol.CancelRequest{ProtocolVersion: "2", SiteID: w.site.SiteID, JobID: padded(p, n)})
			}, 200},
			{"fetch jobId", store.MaxJobIDBytes, "jobId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: padded(p, n), LeaseID: "lease"})
			}, 404},
			{"fetch leaseId", store.MaxLeaseIDBytes, "leaseId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, JobID: p + "job", LeaseID: padded(p, n)})
			}, 404},
			{"result jobId", store.MaxJobIDBytes, "jobId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID,
					JobID: padded(p, n), LeaseID: "lease", Envelope: envelope, Disposition: "ok"})
			}, 404},
			{"result leaseId", store.MaxLeaseIDBytes, "leaseId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID,
					JobID: p + "job", LeaseID: padded(p, n), Envelope: envelope, Disposition: "ok"})
			}, 404},
			{"heartbeat activeLeases[].jobId", store.MaxJobIDBytes, "activeLeases[].jobId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, protocol.GrantRef{JobID: padded(p, n), LeaseID: "lease"}))
			}, 200},
			{"heartbeat activeLeases[].leaseId", store.MaxLeaseIDBytes, "activeLeases[].leaseId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, protocol.GrantRef{JobID: p + "job", LeaseID: padded(p, n)}))
			}, 200},
			{"heartbeat capabilities", store.MaxCapabilityBytes, "capabilities", func(n int, p string) relay.Response {
				body := heartbeatBody(w.daemon)
				body.Capabilities = capabilitiesOfSize(t, n, len("[]"))
				return w.daemonCall(w.daemon, "heartbeat", body)
			}, 200},
			{"release leases[].jobId", store.MaxJobIDBytes, "leases[].jobId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "release", protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID,
					Leases: []protocol.GrantRef{{JobID: padded(p, n), LeaseID: "lease"}}, Reason: "shutdown"})
			}, 200},
			{"release leases[].leaseId", store.MaxLeaseIDBytes, "leases[].leaseId", func(n int, p string) relay.Response {
				return w.daemonCall(w.daemon, "release", protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID,
					Leases: []protocol.GrantRef{{JobID: p + "job", LeaseID: padded(p, n)}}, Reason: "shutdown"})
			}, 200},
			{"pair poll deviceCode", store.MaxDeviceCodeBytes, "deviceCode", func(n int, p string) relay.Response {
				return pairPost(t, w, pollBody(padded(p, n)))
			}, 200},
			{"pair start capabilities", store.MaxCapabilityBytes, "capabilities", func(n int, p string) relay.Response {
				body := startBody(relaytest.NewDaemon(t, p, "bob"))
				body.Capabilities = capabilitiesOfSize(t, n, len("null"))
				return pairPost(t, w, body)
			}, 200},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				for _, n := range []int{tc.max - 1, tc.max, tc.max + 1} {
					prefix := strings.ReplaceAll(tc.name, " ", "-") + "-" + strconv.Itoa(n) + "-"
					before := jobCount(t, w)
					resp := tc.call(n, prefix)
					if n <= tc.max {
						if resp.Status != tc.under {
							t.Fatalf("length %d: got %d %.300s, want %d", n, resp.Status, resp.Body, tc.under)
						}
						continue
					}
					expect(t, resp, http.StatusBadRequest, tooLongBody(tc.field, tc.max))
					if after := jobCount(t, w); after != before {
						t.Fatalf("length %d: a refused request changed the jobs from %d to %d", n, before, after)
					}
				}
			})
		}

		// Counts rather than lengths: each reference is a store read and
		// write, so the list is bounded too.
		countCases := []struct {
			name, field string
			call        func(refs []protocol.GrantRef) relay.Response
		}{
			{"heartbeat activeLeases", "activeLeases", func(refs []protocol.GrantRef) relay.Response {
				return w.daemonCall(w.daemon, "heartbeat", heartbeatBody(w.daemon, refs...))
			}},
			{"release leases", "leases", func(refs []protocol.GrantRef) relay.Response {
				return w.daemonCall(w.daemon, "release", protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: w.daemon.RunnerID, Leases: refs, Reason: "shutdown"})
			}},
		}
		for _, tc := range countCases {
			t.Run(tc.name+" count", func(t *testing.T) {
				for _, n := range []int{store.MaxLeaseRefs - 1, store.MaxLeaseRefs, store.MaxLeaseRefs + 1} {
					resp := tc.call(refsOf(n, tc.name))
					if n <= store.MaxLeaseRefs {
						expectStatus(t, resp, 200)
						continue
					}
					expect(t, resp, http.StatusBadRequest, errBody(protocol.CodeBadRequest,
						tc.field+" has more entries than this relay accepts (at most "+strconv.Itoa(store.MaxLeaseRefs)+")"))
				}
			})
		}

		// The runner header is read before authentication: over its bound
		// it cannot name a runner, and is answered as the reference answers
		// a runner nobody approved, without asking the store. Approved in
		// the projection even at length+1, to show the bound is what
		// refuses it.
		t.Run("runner header", func(t *testing.T) {
			var daemons []*relaytest.Daemon
			fixture := w.base().Consent("alice", "site-a")
			for _, n := range []int{store.MaxRunnerIDBytes - 1, store.MaxRunnerIDBytes, store.MaxRunnerIDBytes + 1} {
				d := relaytest.NewDaemon(t, padded("runner-"+strconv.Itoa(n)+"-", n), "alice")
				daemons = append(daemons, d)
				fixture = fixture.Device(d)
			}
			w.project(fixture)
			for i, d := range daemons {
				resp := w.daemonCall(d, "claim", claimBody(d, 1))
				if i < 2 {
					expectStatus(t, resp, 200)
					continue
				}
				expect(t, resp, http.StatusUnauthorized, errBody(protocol.CodeUnauthorized, "this runner is not recognised"))
				if _, found, err := w.store.Presence(w.ctx, d.RunnerID[:store.MaxRunnerIDBytes]); err != nil || found {
					t.Fatalf("presence after a refused header: %v %v", found, err)
				}
			}
			// Not UTF-8: DynamoDB stores no such string, so it cannot be a
			// runner either.
			notUTF8 := relaytest.SignedDaemonRequest(t, w.daemon.Keys, "runner-\xff", "claim", w.now(), claimBody(w.daemon, 1))
			expect(t, w.do(notUTF8), http.StatusUnauthorized, errBody(protocol.CodeUnauthorized, "this runner is not recognised"))
		})
	})
}

func jobCount(t *testing.T, w *world) int {
	t.Helper()
	jobs, err := w.store.Jobs(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// A job's whole life with every identifier at its bound at once (site id,
// runner id, owner, job id, purpose): every key and index the table builds
// for it (job, lease tag, holder hint, unsealed set, queue partition, site
// lists, cancel list, presence, churn, due index) holds the longest
// composite, and on DynamoDB Local nothing is refused for size.
func TestAWholeJobLifeWithEveryIdentifierAtItsBound(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		owner := padded("owner-", store.MaxOwnerBytes)
		site := relaytest.NewSite(t, padded("site-", store.MaxSiteIDBytes))
		d := relaytest.NewDaemon(t, padded("runner-", store.MaxRunnerIDBytes), owner)
		w.project(relaytest.NewFixture().Site(site).Device(d).Consent(owner, site.SiteID))
		jobID := padded("job-", store.MaxJobIDBytes)
		other := padded("other-", store.MaxJobIDBytes)
		for _, id := range []string{jobID, other} {
			stub := site.Stub(id, owner, w.deadline())
			stub.Purpose = padded("purpose-", store.MaxPurposeBytes)
			resp := w.siteCall(site, "enqueue", protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: site.SiteID, Stub: stub})
			expect(t, resp, 200, `{"jobId":"`+id+`","state":"queued"}`)
		}
		jobs := w.claim(d, 2)
		if len(jobs) != 2 {
			t.Fatalf("claimed %d jobs, want 2", len(jobs))
		}
		var job, cancelled protocol.ClaimedStub
		for _, j := range jobs {
			if j.ID == jobID {
				job = j
			} else {
				cancelled = j
			}
		}
		pending := decode[protocol.SitePendingResponse](t, w.siteCall(site, "pending", nil))
		if len(pending.Jobs) != 2 {
			t.Fatalf("pending %d jobs, want 2", len(pending.Jobs))
		}
		w.seal(site, jobID, d.Public())
		expect(t, w.siteCall(site, "cancel", protocol.CancelRequest{ProtocolVersion: "2", SiteID: site.SiteID, JobID: other}), 200, `{"cancelled":true}`)

		fetched := w.daemonCall(d, "fetch", protocol.FetchRequest{ProtocolVersion: "2", RunnerID: d.RunnerID, JobID: jobID, LeaseID: job.Lease.ID})
		expectStatus(t, fetched, 200)
		beat := decode[protocol.HeartbeatResponse](t, w.daemonCall(d, "heartbeat", heartbeatBody(d, ref(job), ref(cancelled))))
		if len(beat.Cancel) != 1 || beat.Cancel[0].JobID != other {
			t.Fatalf("heartbeat cancel %+v", beat.Cancel)
		}
		result := d.SealResult(t, jobID, "done", site.Public(), w.deadline())
		expectStatus(t, w.daemonCall(d, "result", protocol.ResultRequest{ProtocolVersion: "2", RunnerID: d.RunnerID,
			JobID: jobID, LeaseID: job.Lease.ID, Envelope: result, Disposition: "ok"}), 200)
		expectStatus(t, w.daemonCall(d, "release", protocol.ReleaseRequest{ProtocolVersion: "2", RunnerID: d.RunnerID,
			Leases: []protocol.GrantRef{ref(cancelled)}, Reason: "shutdown"}), 200)
		results := decode[protocol.SiteResultsResponse](t, w.siteCall(site, "results", nil))
		if len(results.Jobs) != 1 || results.Jobs[0].JobID != jobID || results.Jobs[0].RunnerOwner != owner {
			t.Fatalf("results %+v", results.Jobs)
		}

		// Device-code pairing of a second machine that a person approves
		// under the longest runner id and owner.
		newcomer := relaytest.NewDaemon(t, padded("runner2-", store.MaxRunnerIDBytes), owner)
		started := decode[protocol.PairStartResponse](t, pairPost(t, w, startBody(newcomer)))
		w.project(relaytest.NewFixture().Site(site).Device(d, newcomer).Consent(owner, site.SiteID))
		polled := decode[protocol.PairPollResponse](t, pairPost(t, w, pollBody(started.DeviceCode)))
		if polled.Status != protocol.PairApproved || polled.RunnerID != newcomer.RunnerID {
			t.Fatalf("poll %+v", polled)
		}

		// Past the deadline the sweep clears every item the job left.
		w.advance(2 * 3_600_000)
		if _, err := w.relay.Sweep(w.ctx); err != nil {
			t.Fatal(err)
		}
		if n := jobCount(t, w); n != 0 {
			t.Fatalf("%d jobs left after the sweep", n)
		}
	})
}

// A body that is not UTF-8 is a bad request on every protocol path, before
// authentication, that names the first bad byte: the reference would read
// U+FFFD where the sender wrote something else, and store it or compare it
// (a runnerId that no longer matches its signer reads as somebody else's,
// a 403).
func TestABodyThatIsNotUTF8IsABadRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		// The encoder would write invalid UTF-8 as U+FFFD; the bytes go in
		// after it, where a non-JS client would have put them.
		const mark = "INVALID"
		invalid := func(body any) []byte {
			return bytes.Replace(relaytest.Body(t, body), []byte(mark), []byte("\xff\xfe"), 1)
		}
		enqueue := invalid(protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: "site-a", Stub: w.site.Stub("job-1", "alice"+mark, w.deadline())})
		claim := invalid(protocol.ClaimRequest{ProtocolVersion: "2", RunnerID: "runner-1" + mark, Capabilities: capabilities("llm.generate"), Max: 1})
		startReq := startBody(relaytest.NewDaemon(t, "new", "bob"))
		startReq.Daemon.Label = "laptop" + mark
		cases := []struct {
			name string
			req  relay.Request
		}{
			{"in stub.owner, signed over the bytes sent", w.site.Request(t, "enqueue", w.now(), enqueue)},
			{"in runnerId, signed over the bytes sent", w.daemon.Request(t, "claim", w.now(), claim)},
			{"in a pairing's label, unsigned", get("POST", "/byollm/pair", "", invalid(startReq))},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				at := bytes.IndexByte(tc.req.Body, 0xff)
				expect(t, w.do(tc.req), http.StatusBadRequest,
					errBody(protocol.CodeBadRequest, "body is not valid UTF-8 at offset "+strconv.Itoa(at)))
				if n := jobCount(t, w); n != 0 {
					t.Fatalf("%d jobs stored", n)
				}
			})
		}
	})
}
