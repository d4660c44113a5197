package siteserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/protocol"
)

var ctx = context.Background()

// world is a site with two paired runners (alice's and bob's), a revoked
// one (carol's), and alice's job held by alice's runner.
type world struct {
	t       *testing.T
	clock   *clock.Manual
	store   sitestore.Store
	srv     *siteserver.Server
	site    *protocol.Keys
	alice   device
	bob     device
	carol   device
	job     sitestore.Job
	pairing string // a pending pairing's device code
	// pairingCode and pairingKey are its user code and its device's key.
	pairingCode string
	pairingKey  *protocol.Keys
}

type device struct {
	keys     *protocol.Keys
	runnerID string
	owner    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, func(clk *clock.Manual) sitestore.Store { return memory.New(memory.Options{Clock: clk}) })
}

// newWorldOn is newWorld over the store newStore builds on the world's clock.
func newWorldOn(t *testing.T, newStore func(clk *clock.Manual) sitestore.Store) *world {
	t.Helper()
	clk := clock.NewManual(time.UnixMilli(1_800_000_000_000))
	st := newStore(clk)
	siteKeys, err := protocol.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := siteserver.New(siteserver.Config{Store: st, Keys: siteKeys, VerificationURL: "https://site.test/pair"})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clock: clk, store: st, srv: srv, site: siteKeys}
	w.alice = w.pair("alice")
	w.bob = w.pair("bob")
	w.carol = w.pair("carol")
	if err := srv.RevokeRunner(ctx, w.carol.runnerID); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Enqueue(ctx, siteserver.EnqueueInput{ID: "job-a", Kind: protocol.KindGenerate, Payload: json.RawMessage(`{"prompt":"hi"}`), Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	jobs, err := st.Claim(ctx, sitestore.ClaimInput{RunnerID: w.alice.runnerID, RunnerOwner: "alice", Max: 1, LeaseMs: 60_000,
		Capabilities: []protocol.Capability{{Kind: protocol.KindGenerate, Service: "s", BackendID: "ollama", BackendClass: "http", Model: "m", OfferScope: "private"}}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	w.job = jobs[0]
	// A pending pairing, started through the endpoint.
	dk, _ := protocol.GenerateKeys()
	resp := w.call("pair", nil, fmt.Sprintf(`{"protocolVersion":"2","action":"start","device":%s,"daemon":{"version":"0.1.1","label":"l","platform":"linux"},"capabilities":[]}`, mustJSON(dk.Public())))
	var start protocol.PairStartResponse
	if resp.Status != 200 || json.Unmarshal(resp.Body, &start) != nil {
		t.Fatalf("pair start: %d %s", resp.Status, resp.Body)
	}
	w.pairing, w.pairingCode, w.pairingKey = start.DeviceCode, start.UserCode, dk
	return w
}

func (w *world) pair(owner string) device {
	k, err := protocol.GenerateKeys()
	if err != nil {
		w.t.Fatal(err)
	}
	code := sitestore.NewUserCode()
	if err := w.store.CreatePairing(ctx, sitestore.Pairing{DeviceCodeHash: "h-" + owner, UserCode: code, State: sitestore.PairingPending,
		Device: k.Public(), ExpiresAt: w.now() + 60_000, CreatedAt: w.now()}); err != nil {
		w.t.Fatal(err)
	}
	r, err := w.srv.ApprovePairing(ctx, code, owner)
	if err != nil {
		w.t.Fatal(err)
	}
	return device{keys: k, runnerID: r.ID, owner: owner}
}

func (w *world) now() int64 { return w.clock.Now().UnixMilli() }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// call posts body to a daemon endpoint, signed by d (unsigned if nil).
func (w *world) call(endpoint string, d *device, body string) siteserver.Response {
	h := http.Header{}
	if d != nil {
		protocol.SignRequest(d.keys, endpoint, d.runnerID, w.now(), []byte(body)).SetHeaders(h, protocol.HeaderRunner)
	}
	return w.srv.Handle(ctx, siteserver.Request{Method: http.MethodPost, Path: "/byollm/" + endpoint, Header: h, Body: []byte(body)})
}

// snapshot is everything a refused request could have changed.
func (w *world) snapshot() string {
	j, _, _ := w.store.Get(ctx, w.job.ID)
	runners, _ := w.store.Runners(ctx, "")
	var pairings []sitestore.Pairing
	for _, h := range []string{"h-alice", "h-bob", "h-carol", sitestore.HashDeviceCode(w.pairing)} {
		p, _, _ := w.store.PairingByDeviceCodeHash(ctx, h)
		pairings = append(pairings, p)
	}
	_, extra, _ := w.store.Get(ctx, "job-new")
	return mustJSON([]any{j, runners, pairings, extra})
}

func (w *world) resultBody(by device, jobID, leaseID, disposition string, outcome protocol.Outcome) string {
	plain, err := protocol.SealedOutcome{Outcome: outcome, Ran: protocol.RunMetadata{Model: "m", BackendClass: "http", DurationMs: 1}}.Plaintext()
	if err != nil {
		w.t.Fatal(err)
	}
	env, err := protocol.Seal(plain, by.keys, w.site.Public().Encryption, protocol.EnvelopeContext{JobID: jobID,
		SenderKeyID: by.keys.KeyID(), RecipientKeyID: w.site.KeyID(), DeadlineAt: w.job.CreatedAt + protocol.EnvelopeMaxAgeMs, Direction: protocol.DirectionResult})
	if err != nil {
		w.t.Fatal(err)
	}
	return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":%q,"leaseId":%q,"envelope":%s,"disposition":%q}`,
		by.runnerID, jobID, leaseID, mustJSON(env), disposition)
}

// TestDaemonEndpointsRefuseBadInputAndChangeNothing
// sends malformed, oversized, versionless, unsigned, stale, forged,
// revoked, schema-breaking and cross-tenant requests to each endpoint. Each
// must be answered with the protocol's {error, message} body and its
// status, and leave every job, runner and pairing as it was.
func TestDaemonEndpointsRefuseBadInputAndChangeNothing(t *testing.T) {
	bodies := map[string]func(w *world, d device) string{
		"claim": func(_ *world, d device) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"capabilities":[],"max":1}`, d.runnerID)
		},
		"heartbeat": func(_ *world, d device) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"daemonVersion":"0.1.1","capabilities":[],"activeLeases":[]}`, d.runnerID)
		},
		"fetch": func(w *world, d device) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":%q,"leaseId":%q}`, d.runnerID, w.job.ID, w.job.Lease.ID)
		},
		"result": func(w *world, d device) string {
			return w.resultBody(d, w.job.ID, w.job.Lease.ID, "ok", protocol.OKOutcome("x"))
		},
		"release": func(w *world, d device) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"leases":[{"jobId":%q,"leaseId":%q}],"reason":"refused"}`, d.runnerID, w.job.ID, w.job.Lease.ID)
		},
	}
	type attempt struct {
		name   string
		send   func(w *world, endpoint string, good string) siteserver.Response
		status int
		code   string
	}
	signedFor := func(w *world, d device, signedEndpoint, endpoint string, issuedAt int64, signed, sent string) siteserver.Response {
		h := http.Header{}
		protocol.SignRequest(d.keys, signedEndpoint, d.runnerID, issuedAt, []byte(signed)).SetHeaders(h, protocol.HeaderRunner)
		return w.srv.Handle(ctx, siteserver.Request{Method: http.MethodPost, Path: "/byollm/" + endpoint, Header: h, Body: []byte(sent)})
	}
	signedAs := func(w *world, d device, endpoint string, issuedAt int64, signed, sent string) siteserver.Response {
		return signedFor(w, d, endpoint, endpoint, issuedAt, signed, sent)
	}
	attempts := []attempt{
		{"a body that is not JSON", func(w *world, ep, _ string) siteserver.Response {
			return w.call(ep, &w.alice, `{"protocolVersion":"2",`)
		}, 400, protocol.CodeBadRequest},
		{"a body over the limit", func(w *world, ep, _ string) siteserver.Response {
			return w.call(ep, &w.alice, `{"protocolVersion":"2","pad":"`+strings.Repeat("x", siteserver.MaxBodyBytes)+`"}`)
		}, 400, protocol.CodeBadRequest},
		{"no protocol version", func(w *world, ep, good string) siteserver.Response {
			return w.call(ep, &w.alice, strings.Replace(good, `"protocolVersion":"2",`, "", 1))
		}, 400, protocol.CodeUnsupportedProtocolVersion},
		{"an unsupported protocol version", func(w *world, ep, good string) siteserver.Response {
			return w.call(ep, &w.alice, strings.Replace(good, `"protocolVersion":"2"`, `"protocolVersion":"99"`, 1))
		}, 400, protocol.CodeUnsupportedProtocolVersion},
		{"no signature", func(w *world, ep, good string) siteserver.Response { return w.call(ep, nil, good) }, 401, protocol.CodeUnauthorized},
		{"a signature 121 s old", func(w *world, ep, good string) siteserver.Response {
			return signedAs(w, w.alice, ep, w.now()-121_000, good, good)
		}, 401, protocol.CodeUnauthorized},
		{"a signature over other bytes", func(w *world, ep, good string) siteserver.Response {
			return signedAs(w, w.alice, ep, w.now(), good+" ", good)
		}, 401, protocol.CodeUnauthorized},
		{"a signature for another endpoint", func(w *world, ep, good string) siteserver.Response {
			other := "claim"
			if ep == "claim" {
				other = "release"
			}
			return signedFor(w, w.alice, other, ep, w.now(), good, good)
		}, 401, protocol.CodeUnauthorized},
		{"a stranger's key under alice's runner id", func(w *world, ep, good string) siteserver.Response {
			stranger := w.bob
			stranger.runnerID = w.alice.runnerID
			return signedAs(w, stranger, ep, w.now(), good, good)
		}, 401, protocol.CodeUnauthorized},
		{"a revoked runner", func(w *world, ep, _ string) siteserver.Response {
			return w.call(ep, &w.carol, bodies[ep](w, w.carol))
		}, 403, protocol.CodeRevoked},
		{"a body that fails the schema", func(w *world, ep, good string) siteserver.Response {
			return w.call(ep, &w.alice, strings.Replace(good, `"protocolVersion":"2"`, `"protocolVersion":"2","extra":1`, 1))
		}, 400, protocol.CodeBadRequest},
		{"bob signing a body that names alice's runner", func(w *world, ep, good string) siteserver.Response {
			return w.call(ep, &w.bob, good)
		}, 401, protocol.CodeUnauthorized},
	}
	for _, ep := range []string{"claim", "heartbeat", "fetch", "result", "release"} {
		for _, a := range attempts {
			t.Run(ep+"/"+a.name, func(t *testing.T) {
				w := newWorld(t)
				before := w.snapshot()
				resp := a.send(w, ep, bodies[ep](w, w.alice))
				assertRefusal(t, resp, a.status, a.code)
				if after := w.snapshot(); after != before {
					t.Fatalf("a refused request changed state:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// TestCrossTenantDaemonRequestsChangeNothing: bob's own, correctly signed
// requests that name alice's job and lease.
func TestCrossTenantDaemonRequestsChangeNothing(t *testing.T) {
	cases := []struct {
		name, endpoint string
		body           func(w *world) string
		status         int
		code           string
		body200        string
	}{
		{"fetch of alice's job under her lease", "fetch", func(w *world) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"jobId":%q,"leaseId":%q}`, w.bob.runnerID, w.job.ID, w.job.Lease.ID)
		}, 404, protocol.CodeNotFound, ""},
		{"result for alice's job under her lease", "result", func(w *world) string {
			return w.resultBody(w.bob, w.job.ID, w.job.Lease.ID, "ok", protocol.OKOutcome("not yours"))
		}, 200, "", `{"accepted":false,"state":"claimed"}`},
		{"result sealed by alice's key, sent by bob", "result", func(w *world) string {
			b := w.resultBody(w.alice, w.job.ID, w.job.Lease.ID, "ok", protocol.OKOutcome("x"))
			return strings.Replace(b, w.alice.runnerID, w.bob.runnerID, 1)
		}, 400, protocol.CodeBadRequest, ""},
		{"a sealed error declared ok", "result", func(w *world) string {
			b := w.resultBody(w.alice, w.job.ID, w.job.Lease.ID, "ok", protocol.FailedOutcome("e", "m", false))
			return b
		}, 400, protocol.CodeBadRequest, ""},
		{"release of alice's lease", "release", func(w *world) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"leases":[{"jobId":%q,"leaseId":%q}],"reason":"refused"}`, w.bob.runnerID, w.job.ID, w.job.Lease.ID)
		}, 200, "", `{"released":[]}`},
		{"heartbeat renewing alice's lease", "heartbeat", func(w *world) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"daemonVersion":"0.1.1","capabilities":[],"activeLeases":[{"jobId":%q,"leaseId":%q}]}`, w.bob.runnerID, w.job.ID, w.job.Lease.ID)
		}, 200, "", ""},
		{"claim of alice's private job", "claim", func(w *world) string {
			return fmt.Sprintf(`{"protocolVersion":"2","runnerId":%q,"capabilities":[{"kind":"llm.generate","service":"s","backendId":"ollama","backendClass":"http","model":"m","offerScope":"team"}],"max":5}`, w.bob.runnerID)
		}, 200, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			// The sealed-error case is alice's own request: sign as her.
			d := &w.bob
			if c.name == "a sealed error declared ok" {
				d = &w.alice
			}
			// Release alice's job to the queue first for the claim case, so
			// there is something bob could wrongly take.
			if c.endpoint == "claim" {
				w.store.Release(ctx, sitestore.ReleaseInput{RunnerID: w.alice.runnerID, Leases: []protocol.GrantRef{{JobID: w.job.ID, LeaseID: w.job.Lease.ID}}})
			}
			before := mustJSON(w.jobState())
			resp := w.call(c.endpoint, d, c.body(w))
			if c.code != "" {
				assertRefusal(t, resp, c.status, c.code)
			} else if resp.Status != 200 {
				t.Fatalf("status %d: %s", resp.Status, resp.Body)
			}
			if c.body200 != "" && string(resp.Body) != c.body200 {
				t.Fatalf("answer %s, want %s", resp.Body, c.body200)
			}
			if c.endpoint == "heartbeat" && !strings.Contains(string(resp.Body), `"lost":[{"jobId":"job-a"`) {
				t.Fatalf("bob's heartbeat did not report alice's lease lost: %s", resp.Body)
			}
			if c.endpoint == "claim" && !strings.Contains(string(resp.Body), `"jobs":[]`) {
				t.Fatalf("bob was handed alice's private job: %s", resp.Body)
			}
			if after := mustJSON(w.jobState()); after != before {
				t.Fatalf("changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func (w *world) jobState() sitestore.Job {
	j, _, _ := w.store.Get(ctx, w.job.ID)
	j.UpdatedAt = 0
	return j
}

func assertRefusal(t *testing.T, resp siteserver.Response, status int, code string) {
	t.Helper()
	if resp.Status != status {
		t.Fatalf("status %d, want %d: %s", resp.Status, status, resp.Body)
	}
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(resp.Body))
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("body is not JSON: %s", resp.Body)
	}
	if body["error"] != code {
		t.Fatalf("error %v, want %s: %s", body["error"], code, resp.Body)
	}
	if msg, _ := body["message"].(string); msg == "" {
		t.Fatalf("no message: %s", resp.Body)
	}
	if protocol.StatusOf(code) != status && status != http.StatusMethodNotAllowed {
		t.Fatalf("code %s travels as %d in the protocol, answered %d", code, protocol.StatusOf(code), status)
	}
	if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", resp.Header)
	}
}

// TestTheAppAPIRefusesBadAndCrossTenantInput is the same
// bar for the app API the site's backend calls.
func TestTheAppAPIRefusesBadAndCrossTenantInput(t *testing.T) {
	cases := []struct {
		name, op, body string
		method         string
		status         int
		code           string
	}{
		{"a body that is not JSON", "enqueue", `{"kind":`, "", 400, protocol.CodeBadRequest},
		{"an unknown member", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x"},"owner":"alice","priority":9}`, "", 400, protocol.CodeBadRequest},
		{"a payload carrying code", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x","command":"rm -rf /"},"owner":"alice"}`, "", 400, protocol.CodeBadRequest},
		{"a chat payload under llm.generate", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"messages":[{"role":"user","content":"x"}]},"owner":"alice"}`, "", 400, protocol.CodeBadRequest},
		{"an unknown kind", "enqueue", `{"id":"job-new","kind":"shell.exec","payload":{"prompt":"x"},"owner":"alice"}`, "", 400, protocol.CodeBadRequest},
		{"no owner", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x"}}`, "", 400, protocol.CodeBadRequest},
		{"an unknown audience", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x"},"owner":"alice","audience":"public"}`, "", 400, protocol.CodeBadRequest},
		{"a negative ttl", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x"},"owner":"alice","ttlMs":-5}`, "", 400, protocol.CodeBadRequest},
		{"too many dependencies", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"x"},"owner":"alice","dependsOn":[` + strings.TrimSuffix(strings.Repeat(`"d",`, 33), ",") + `]}`, "", 400, protocol.CodeBadRequest},
		{"a body over the limit", "enqueue", `{"id":"job-new","kind":"llm.generate","payload":{"prompt":"` + strings.Repeat("x", siteserver.MaxBodyBytes) + `"},"owner":"alice"}`, "", 400, protocol.CodeBadRequest},
		{"bob reading alice's job", "job", `{"jobId":"job-a","owner":"bob"}`, "", 404, protocol.CodeNotFound},
		{"bob reading alice's result", "result", `{"jobId":"job-a","owner":"bob"}`, "", 404, protocol.CodeNotFound},
		{"bob cancelling alice's job", "cancel", `{"jobId":"job-a","owner":"bob"}`, "", 404, protocol.CodeNotFound},
		{"bob revoking alice's runner", "runners/revoke", `{"runnerId":"ALICE","owner":"bob"}`, "", 404, protocol.CodeNotFound},
		{"approving an unknown code", "pairings/approve", `{"userCode":"ZZZZ-ZZZZ","owner":"bob"}`, "", 400, protocol.CodeBadRequest},
		{"approving without an owner", "pairings/approve", `{"userCode":"ZZZZ-ZZZZ"}`, "", 400, protocol.CodeBadRequest},
		{"a lookup without a code", "pairings/lookup", `{}`, "", 400, protocol.CodeBadRequest},
		{"a lookup of an unknown code", "pairings/lookup", `{"userCode":"ZZZZ-ZZZZ"}`, "", 404, protocol.CodeNotFound},
		{"a lookup with an unknown member", "pairings/lookup", `{"userCode":"ZZZZ-ZZZZ","all":true}`, "", 400, protocol.CodeBadRequest},
		{"a cancel with no job id", "cancel", `{"owner":"alice"}`, "", 400, protocol.CodeBadRequest},
		{"an unknown operation", "drop-tables", `{}`, "", 404, protocol.CodeNotFound},
		{"a GET", "job", ``, http.MethodGet, 405, protocol.CodeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			before := w.snapshot()
			body := strings.ReplaceAll(c.body, "ALICE", w.alice.runnerID)
			method := c.method
			if method == "" {
				method = http.MethodPost
			}
			resp := w.srv.HandleApp(ctx, siteserver.Request{Method: method, Path: "/app/" + c.op, Header: http.Header{}, Body: []byte(body)})
			assertRefusal(t, resp, c.status, c.code)
			if after := w.snapshot(); after != before {
				t.Fatalf("a refused request changed state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestPairRefusesBadInput: the unauthenticated endpoint.
func TestPairRefusesBadInput(t *testing.T) {
	w := newWorld(t)
	forged, _ := protocol.GenerateKeys()
	other, _ := protocol.GenerateKeys()
	identity := forged.Public()
	identity.Encryption = other.Public().Encryption // another party's encryption key
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"not JSON", `{"protocolVersion":"2"`, 400, protocol.CodeBadRequest},
		{"neither start nor poll", `{"protocolVersion":"2","action":"steal"}`, 400, protocol.CodeBadRequest},
		{"a forged identity", fmt.Sprintf(`{"protocolVersion":"2","action":"start","device":%s,"daemon":{"version":"0.1.1","label":"l","platform":"linux"},"capabilities":[]}`, mustJSON(identity)), 400, protocol.CodeBadRequest},
		{"an unknown device code", `{"protocolVersion":"2","action":"poll","deviceCode":"` + strings.Repeat("A", 43) + `"}`, 404, protocol.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := w.snapshot()
			assertRefusal(t, w.call("pair", nil, c.body), c.status, c.code)
			if after := w.snapshot(); after != before {
				t.Fatal("a refused pair request changed state")
			}
		})
	}
	// A pending poll reveals nothing; a path that is not an endpoint is a
	// JSON 404.
	resp := w.call("pair", nil, `{"protocolVersion":"2","action":"poll","deviceCode":"`+w.pairing+`"}`)
	if string(resp.Body) != `{"status":"pending"}` {
		t.Fatalf("pending poll: %s", resp.Body)
	}
	nf := w.srv.Handle(ctx, siteserver.Request{Method: http.MethodPost, Path: "/x/byollm/claim", Header: http.Header{}, Body: []byte(`{}`)})
	assertRefusal(t, nf, 404, protocol.CodeNotFound)
	get := w.srv.Handle(ctx, siteserver.Request{Method: http.MethodGet, Path: "/byollm/claim", Header: http.Header{}})
	assertRefusal(t, get, 405, protocol.CodeBadRequest)
}

// pairings/lookup finds a pending pairing by the code a person typed, and
// answers the key id the daemon printed beside its code, so the page can
// show both before Approve; pairings/pending is the same call. Neither
// changes anything.
func TestTheAppLooksAPairingUpByItsCode(t *testing.T) {
	w := newWorld(t)
	before := w.snapshot()
	var answers []string
	for _, op := range []string{"pairings/lookup", "pairings/pending"} {
		// As a person types it: lower case.
		body := `{"userCode":"` + strings.ToLower(w.pairingCode) + `"}`
		resp := w.srv.HandleApp(ctx, siteserver.Request{Method: http.MethodPost, Path: "/app/" + op, Header: http.Header{}, Body: []byte(body)})
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", op, resp.Status, resp.Body)
		}
		var got struct {
			UserCode, Fingerprint, Label, Platform, DaemonVersion string
			ExpiresAt                                             int64
		}
		if err := json.Unmarshal(resp.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.UserCode != w.pairingCode || got.Fingerprint != w.pairingKey.KeyID() || got.Label != "l" || got.Platform != "linux" ||
			got.DaemonVersion != "0.1.1" || got.ExpiresAt <= w.now() {
			t.Fatalf("%s answered %s; want code %s, key id %s", op, resp.Body, w.pairingCode, w.pairingKey.KeyID())
		}
		answers = append(answers, string(resp.Body))
	}
	if answers[0] != answers[1] {
		t.Fatalf("pairings/lookup and pairings/pending differ:\n%s\n%s", answers[0], answers[1])
	}
	if after := w.snapshot(); after != before {
		t.Fatalf("a lookup changed state:\nbefore %s\nafter  %s", before, after)
	}
}
