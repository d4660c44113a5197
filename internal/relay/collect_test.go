package relay_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// collectCall is byorelay's collect: a signed POST to results, with the
// query the reference reads the site from.
func (w *world) collectCall(querySite string, body any) relay.Response {
	w.t.Helper()
	raw := relaytest.Body(w.t, body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	protocol.SignSiteRequest(w.site.Keys, "results", w.site.SiteID, w.nowMs(), raw).SetHeaders(h, protocol.HeaderSite)
	return w.do(relay.Request{Method: http.MethodPost, Path: "/relay/site/results", Header: h, Body: raw,
		RawQuery: url.Values{"siteId": {querySite}, "protocolVersion": {"2"}}.Encode()})
}

// finishJob runs id to done through the daemon plane.
func (w *world) finishJob(id string) {
	w.t.Helper()
	w.enqueue(w.site, id, "alice")
	granted := w.claim(w.daemon, 1)
	if len(granted) != 1 || granted[0].ID != id {
		w.t.Fatalf("claim granted %+v, want %s", granted, id)
	}
	w.seal(w.site, id, w.daemon.Public())
	ref := protocol.GrantRef{JobID: id, LeaseID: granted[0].Lease.ID}
	expectStatus(w.t, w.daemonCall(w.daemon, "fetch", fetchBody(w.daemon, ref)), 200)
	result := w.daemon.SealResult(w.t, id, "the answer", w.site.Public(), w.deadline())
	expect(w.t, w.daemonCall(w.daemon, "result", resultBody(w.daemon, ref, result)), 200, `{"accepted":true,"state":"done"}`)
}

func listed(t *testing.T, resp relay.Response) protocol.CollectResponse {
	t.Helper()
	expectStatus(t, resp, 200)
	return decode[protocol.CollectResponse](t, resp)
}

func resultIDs(r protocol.CollectResponse) []string {
	ids := []string{}
	for _, j := range r.Jobs {
		ids = append(ids, j.JobID)
	}
	return ids
}

func TestCollect(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("a collected result is no longer listed, to the GET either", func(t *testing.T) {
			w := newWorld(t, f)
			w.finishJob("job-1")
			w.finishJob("job-2")
			got := listed(t, w.collectCall("site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{}}))
			if ids := resultIDs(got); strings.Join(ids, ",") != "job-1,job-2" || got.Evicted != nil {
				t.Fatalf("before: %v, evicted %v", ids, got.Evicted)
			}
			got = listed(t, w.collectCall("site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{"job-1"}}))
			if ids := resultIDs(got); strings.Join(ids, ",") != "job-2" {
				t.Fatalf("after: %v", ids)
			}
			plain := decode[protocol.SiteResultsResponse](t, w.siteCall(w.site, "results", nil))
			if len(plain.Jobs) != 1 || plain.Jobs[0].JobID != "job-2" {
				t.Fatalf("GET after collect: %+v", plain)
			}
		})

		t.Run("the answer without a collect is the reference's, byte for byte", func(t *testing.T) {
			w := newWorld(t, f)
			w.finishJob("job-1")
			get := w.siteCall(w.site, "results", nil)
			post := w.collectCall("site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{}})
			expect(t, post, 200, string(get.Body))
		})

		t.Run("an eviction is listed until the site collects it", func(t *testing.T) {
			w := newWorld(t, f)
			w.enqueue(w.site, "job-1", "alice")
			for range store.SealAttemptsBeforeEviction {
				if got := w.claim(w.daemon, 1); len(got) != 1 {
					t.Fatalf("claim granted %d", len(got))
				}
				w.advance(store.AwaitingPayloadMs)
				if _, err := w.relay.Sweep(w.ctx); err != nil {
					t.Fatal(err)
				}
			}
			expect(t, w.collectCall("site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{}}),
				200, `{"jobs":[],"evicted":["job-1"]}`)
			expect(t, w.collectCall("site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{"job-1"}}),
				200, `{"jobs":[]}`)
		})

		t.Run("a bad collect is refused with the protocol's body and changes nothing", func(t *testing.T) {
			w := newWorld(t, f)
			w.finishJob("job-1")
			tooMany := make([]string, protocol.MaxCollect+1)
			for i := range tooMany {
				tooMany[i] = "job-1"
			}
			for _, c := range []struct {
				name, query string
				body        any
				status      int
				want        string
			}{
				{"an empty id", "site-a", `{"protocolVersion":"2","siteId":"site-a","collected":[""]}`, 400, errBody("bad-request", "request failed schema validation")},
				{"no list", "site-a", `{"protocolVersion":"2","siteId":"site-a"}`, 400, errBody("bad-request", "request failed schema validation")},
				{"an unknown field", "site-a", `{"protocolVersion":"2","siteId":"site-a","collected":["job-1"],"all":true}`, 400, errBody("bad-request", "request failed schema validation")},
				{"too many ids", "site-a", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: tooMany}, 400, errBody("bad-request", "request failed schema validation")},
				{"a query naming another site", "site-b", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-a", Collected: []string{"job-1"}}, 400, errBody("bad-request", "request failed schema validation")},
				{"a body naming another site", "site-b", protocol.CollectRequest{ProtocolVersion: "2", SiteID: "site-b", Collected: []string{"job-1"}}, 403, errBody("forbidden", "that is not your site")},
			} {
				t.Run(c.name, func(t *testing.T) {
					expect(t, w.collectCall(c.query, c.body), c.status, c.want)
				})
			}
			if job, _, _ := w.store.Job(w.ctx, "site-a", "job-1"); job.Collected {
				t.Fatal("a refused collect collected the job")
			}
		})
	})
}
