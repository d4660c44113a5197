package apiserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
)

// The relay's happy path and its auth refusals, over real HTTP through the
// local API server, into the functions' own handlers, over DynamoDB Local:
// the path a daemon and a site take in AWS, minus AWS.

func TestHappyPathOverHTTP(t *testing.T) {
	st := startStack(t)
	demo := st.demo
	site, daemon := demo.Site, demo.Daemon
	now := time.Now()
	deadline := now.Add(time.Hour).UnixMilli()

	// The site publishes a stub.
	stub := site.Stub("job-1", daemon.Owner, deadline)
	code, body := st.send(t, site.Request(t, "enqueue", time.Now(), protocol.EnqueueRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: site.SiteID, Stub: stub,
	}))
	wantJSON(t, "enqueue", code, body, 200, `{"jobId":"job-1","state":"queued"}`)

	// The daemon claims it.
	code, body = st.send(t, daemon.Request(t, "claim", time.Now(), protocol.ClaimRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: daemon.RunnerID,
		Capabilities: []protocol.Capability{capability()}, Max: 1,
	}))
	var claim protocol.ClaimResponse
	decode(t, "claim", code, body, &claim)
	if len(claim.Jobs) != 1 || claim.Jobs[0].ID != "job-1" || claim.Jobs[0].Lease.RunnerID != daemon.RunnerID {
		t.Fatalf("claim: %s", body)
	}
	lease := claim.Jobs[0].Lease

	// The site sees who claimed it, and seals the payload to that device.
	code, body = st.send(t, site.Request(t, "pending", time.Now(), nil))
	var pending protocol.SitePendingResponse
	decode(t, "pending", code, body, &pending)
	if len(pending.Jobs) != 1 || pending.Jobs[0].JobID != "job-1" || pending.Jobs[0].LeaseID != lease.ID ||
		pending.Jobs[0].Device == nil || *pending.Jobs[0].Device != daemon.Public() {
		t.Fatalf("pending: %s", body)
	}
	envelopeDeadline := now.UnixMilli() + protocol.EnvelopeMaxAgeMs
	payload := site.Seal(t, "job-1", "write a haiku about relays", *pending.Jobs[0].Device, envelopeDeadline)
	code, body = st.send(t, site.Request(t, "payload", time.Now(), protocol.PayloadRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: site.SiteID, JobID: "job-1", Envelope: payload,
	}))
	wantJSON(t, "payload", code, body, 200, `{"jobId":"job-1","state":"ready"}`)

	// The daemon fetches the payload and can open it; the relay could not.
	code, body = st.send(t, daemon.Request(t, "fetch", time.Now(), protocol.FetchRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: daemon.RunnerID, JobID: "job-1", LeaseID: lease.ID,
	}))
	var fetched protocol.FetchResponse
	decode(t, "fetch", code, body, &fetched)
	plain, err := protocol.Open(fetched.Envelope, daemon.Keys, site.Public().Identity, protocol.ExpectedEnvelope{
		JobID: "job-1", SenderKeyID: site.KeyID(), RecipientKeyID: daemon.Keys.KeyID(), Direction: protocol.DirectionPayload,
	})
	if err != nil || plain != "write a haiku about relays" {
		t.Fatalf("open payload: %q, %v", plain, err)
	}

	// The daemon returns a sealed result.
	result := daemon.SealResult(t, "job-1", "frames pass through / the relay cannot read them / only routes the light", site.Public(), envelopeDeadline)
	code, body = st.send(t, daemon.Request(t, "result", time.Now(), protocol.ResultRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: daemon.RunnerID, JobID: "job-1", LeaseID: lease.ID,
		Envelope: result, Disposition: "ok",
	}))
	wantJSON(t, "result", code, body, 200, `{"accepted":true,"state":"done"}`)

	// The site collects it and opens it.
	code, body = st.send(t, site.Request(t, "results", time.Now(), nil))
	var results protocol.SiteResultsResponse
	decode(t, "results", code, body, &results)
	if len(results.Jobs) != 1 || results.Jobs[0].Envelope == nil || results.Jobs[0].RunnerOwner != daemon.Owner ||
		results.Jobs[0].Disposition != "ok" || results.Jobs[0].LeaseID != lease.ID {
		t.Fatalf("results: %s", body)
	}
	plain, err = protocol.Open(*results.Jobs[0].Envelope, site.Keys, daemon.Public().Identity, protocol.ExpectedEnvelope{
		JobID: "job-1", SenderKeyID: daemon.Keys.KeyID(), RecipientKeyID: site.KeyID(), Direction: protocol.DirectionResult,
	})
	if err != nil || plain != "frames pass through / the relay cannot read them / only routes the light" {
		t.Fatalf("open result: %q, %v", plain, err)
	}
}

func TestAuthRefusalsOverHTTP(t *testing.T) {
	st := startStack(t)
	site, daemon := st.demo.Site, st.demo.Daemon
	claimBody := protocol.ClaimRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: daemon.RunnerID,
		Capabilities: []protocol.Capability{capability()}, Max: 1,
	}
	enqueueBody := protocol.EnqueueRequest{
		ProtocolVersion: protocol.ProtocolVersion, SiteID: site.SiteID,
		Stub: site.Stub("job-x", daemon.Owner, time.Now().Add(time.Hour).UnixMilli()),
	}
	stranger := relaytest.NewSite(t, site.SiteID) // the right site id, somebody else's key
	notSigned := `{"error":"unauthorized","message":"this request is not signed"}`
	badSignature := `{"error":"unauthorized","message":"signature check failed"}`

	unsigned := func(r relay.Request, header string) relay.Request {
		r.Header.Del(header)
		r.Header.Del(protocol.HeaderIssuedAt)
		r.Header.Del(protocol.HeaderSignature)
		return r
	}
	tampered := func(r relay.Request) relay.Request {
		r.Body = bytes.Replace(r.Body, []byte(`"max":1`), []byte(`"max":2`), 1)
		return r
	}

	cases := []struct {
		name     string
		req      relay.Request
		wantCode int
		wantBody string // exact, unless "" (then only the error code is checked)
		wantErr  string
	}{
		{"an unsigned claim", unsigned(daemon.Request(t, "claim", time.Now(), claimBody), protocol.HeaderRunner), 401, notSigned, ""},
		{"an unsigned enqueue", unsigned(site.Request(t, "enqueue", time.Now(), enqueueBody), protocol.HeaderSite), 401, notSigned, ""},
		{"a claim whose body changed after signing", tampered(daemon.Request(t, "claim", time.Now(), claimBody)), 401, badSignature, ""},
		{"a claim signed ten minutes ago", daemon.Request(t, "claim", time.Now().Add(-10*time.Minute), claimBody), 401, "", "clock-skew"},
		{"an enqueue signed ten minutes ahead", site.Request(t, "enqueue", time.Now().Add(10*time.Minute), enqueueBody), 401, "", "clock-skew"},
		{"an enqueue signed with another key", stranger.Request(t, "enqueue", time.Now(), enqueueBody), 401, badSignature, ""},
		{"results read with another key", stranger.Request(t, "results", time.Now(), nil), 401, badSignature, ""},
		{"an unknown path outside the planes", relay.Request{Method: "POST", Path: "/literally/anything/claim", Header: http.Header{}, Body: []byte(`{"protocolVersion":"2"}`)}, 404, `{"error":"not-found"}`, ""},
		{"an unknown daemon-plane endpoint", relay.Request{Method: "POST", Path: "/byollm/nothing", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"protocolVersion":"2"}`)}, 404, `{"error":"not-found"}`, ""},
		{"a claim from protocol version 1", daemon.Request(t, "claim", time.Now(), []byte(`{"protocolVersion":"1","runnerId":"`+daemon.RunnerID+`","capabilities":[],"max":1}`)), 400, "", "unsupported-protocol-version"},
		{"a site read with no version", relay.Request{Method: "GET", Path: "/relay/site/pending", RawQuery: "siteId=" + site.SiteID, Header: http.Header{}}, 400, "", "unsupported-protocol-version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := st.send(t, c.req)
			if c.wantBody != "" {
				wantJSON(t, c.name, code, body, c.wantCode, c.wantBody)
				return
			}
			if code != c.wantCode || errorCode(t, body) != c.wantErr {
				t.Fatalf("got %d %s, want %d %s", code, body, c.wantCode, c.wantErr)
			}
		})
	}

	t.Run("a clock-skew refusal reports the server time and the window", func(t *testing.T) {
		_, body := st.send(t, daemon.Request(t, "claim", time.Now().Add(-10*time.Minute), claimBody))
		var skew struct {
			Error      string `json:"error"`
			ServerTime int64  `json:"serverTime"`
			MaxSkewMs  int64  `json:"maxSkewMs"`
		}
		if err := json.Unmarshal(body, &skew); err != nil || skew.MaxSkewMs != 120000 || time.Since(time.UnixMilli(skew.ServerTime)).Abs() > time.Minute {
			t.Fatalf("clock-skew body %s (%v)", body, err)
		}
	})

	t.Run("a revoked device is refused on its next request", func(t *testing.T) {
		code, body := st.send(t, daemon.Request(t, "claim", time.Now(), claimBody))
		if code != 200 {
			t.Fatalf("before revocation: %d %s", code, body)
		}
		st.revokeDevice(t, daemon)
		code, body = st.send(t, daemon.Request(t, "claim", time.Now(), claimBody))
		wantJSON(t, "claim after revocation", code, body, 403, `{"error":"revoked","message":"routing for this runner has been revoked"}`)
	})
}

func capability() protocol.Capability {
	return protocol.Capability{
		Kind: "llm.generate", Service: "local", BackendID: "ollama", BackendClass: "http",
		Model: "llama3.2", OfferScope: "private",
	}
}

// send makes r against the stack over HTTP.
func (st *stack) send(t *testing.T, r relay.Request) (int, []byte) {
	t.Helper()
	url := st.baseURL + r.Path
	if r.RawQuery != "" {
		url += "?" + r.RawQuery
	}
	req, err := http.NewRequest(r.Method, url, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range r.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 500 && ct != "application/json" && ct != "application/json; charset=utf-8" {
		t.Errorf("%s %s: content-type %q", r.Method, r.Path, ct)
	}
	return resp.StatusCode, body
}

func wantJSON(t *testing.T, what string, code int, body []byte, wantCode int, wantBody string) {
	t.Helper()
	if code != wantCode || string(body) != wantBody {
		t.Fatalf("%s: got %d %s, want %d %s", what, code, body, wantCode, wantBody)
	}
}

func decode(t *testing.T, what string, code int, body []byte, v any) {
	t.Helper()
	if code != 200 {
		t.Fatalf("%s: status %d: %s", what, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not a JSON error: %s", body)
	}
	return e.Error
}
