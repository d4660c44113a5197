package relay_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/internal/stream/seal"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// malformedBody is one body that is not one JSON object in UTF-8, and the
// refusal every endpoint must answer it with.
type malformedBody struct {
	name string
	raw  []byte
	// status, code and message are the answer; message is the whole
	// message unless prefix is set.
	status  int
	code    string
	message string
	prefix  bool
	// queried: also sent with protocolVersion=2 in the query, which must
	// not change the answer (the body is checked before the version).
	queried bool
}

func malformedBodies() []malformedBody {
	// Deep, and under the stream lane's 64 KiB so every endpoint parses it.
	deep := strings.Repeat("[", 30_000) + strings.Repeat("]", 30_000)
	bad := func(name, raw, message string) malformedBody {
		return malformedBody{name: name, raw: []byte(raw), status: 400, code: protocol.CodeBadRequest, message: message, queried: true}
	}
	return []malformedBody{
		bad("trailing bytes", `{"protocolVersion":"2"} x`, "body has bytes after its JSON value at offset 24"),
		bad("a second object", `{"protocolVersion":"2"}{}`, "body has bytes after its JSON value at offset 23"),
		bad("BOM", "\xef\xbb\xbf{\"protocolVersion\":\"2\"}", "body starts with a byte-order mark; send the JSON object without one"),
		bad("array", `[{"protocolVersion":"2"}]`, "body must be a JSON object, got an array"),
		bad("string", `"2"`, "body must be a JSON object, got a string"),
		bad("number", `2`, "body must be a JSON object, got a number"),
		bad("null", `null`, "body must be a JSON object, got null"),
		bad("invalid UTF-8", "{\"protocolVersion\":\"2\",\"x\":\"\xff\"}", "body is not valid UTF-8 at offset 28"),
		bad("not JSON", `{"protocolVersion":"2"`, "body is not valid JSON: it ends at offset 22 inside its value"),
		bad("deeply nested array", deep, "body must be a JSON object, got an array"),
		// An empty body is no body, as in the reference: the version is
		// the query's, and this query declares none.
		{name: "empty", raw: []byte{}, status: 400, code: protocol.CodeUnsupportedProtocolVersion,
			message: "this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`."},
	}
}

// malformedEndpoint is one endpoint and how a correctly signed request
// to it carries raw (with query added to its own).
type malformedEndpoint struct {
	name string
	req  func(raw []byte, query url.Values) relay.Request
	// schema is the words this endpoint's schema refusal uses; "" for
	// pending, which reads the query and never its body (as the
	// reference's does), so a well-formed body of any shape is a read.
	schema string
	// ceiling is the start of its refusal of an oversized body.
	ceiling string
}

// TestMalformedBodiesAreRefusedForWhatIsWrong sends every malformed body to
// every endpoint that takes one, each signed over the exact bytes sent
// where the endpoint is signed (so the refusal is about the body, not the
// signature), with and without a version in the query, and checks the
// status, the code, the words, and that nothing in the store moved: jobs,
// presence, pairings and the running job's stream.
func TestMalformedBodiesAreRefusedForWhatIsWrong(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newStreamWorld(t, f)
		w.push("hello")
		w.enqueue(w.site, "queued", "alice")
		started := decode[protocol.PairStartResponse](t, pairPost(t, w.world, startBody(relaytest.NewDaemon(t, "newcomer", "alice"))))
		if started.DeviceCode == "" {
			t.Fatal("no pairing started")
		}
		endpoints := w.malformedEndpoints()
		before := w.malformedSnapshot()

		huge := []byte(`{"protocolVersion":"2","x":"` + strings.Repeat("A", relay.MaxBodyBytes) + `"}`)
		deepInObject := []byte(`{"protocolVersion":"2","x":` + strings.Repeat("[", 30_000) + strings.Repeat("]", 30_000) + `}`)
		for _, ep := range endpoints {
			t.Run(ep.name, func(t *testing.T) {
				cases := malformedBodies()
				// Well-formed and versioned, so it passes the body and the
				// version and is refused by the endpoint's schema, after
				// the signature: deep nesting costs the handshake nothing.
				deepCase := malformedBody{name: "deeply nested inside an object", raw: deepInObject,
					status: 400, code: protocol.CodeBadRequest, message: ep.schema}
				if ep.schema == "" {
					deepCase = malformedBody{name: deepCase.name, raw: deepInObject, status: 200}
				}
				cases = append(cases, deepCase)
				if f.name == "memory" {
					// Refused before it is parsed; megabytes are signed
					// once per endpoint, on the memory run.
					cases = append(cases, malformedBody{name: "oversized", raw: huge,
						status: 400, code: protocol.CodeBadRequest, message: ep.ceiling, prefix: true})
				}
				for _, mb := range cases {
					queries := []url.Values{{}}
					if mb.queried {
						queries = append(queries, url.Values{"protocolVersion": {"2"}})
					}
					for _, q := range queries {
						name := mb.name
						if len(q) > 0 {
							name += " with a version in the query"
						}
						t.Run(name, func(t *testing.T) {
							resp := w.do(ep.req(mb.raw, q))
							if mb.status == http.StatusOK {
								expectStatus(t, resp, http.StatusOK)
							} else {
								expectRefusal(t, resp, mb)
							}
							if after := w.malformedSnapshot(); !reflect.DeepEqual(after, before) {
								b, _ := json.Marshal(before)
								a, _ := json.Marshal(after)
								t.Fatalf("state changed\nbefore %s\nafter  %s", b, a)
							}
						})
					}
				}
			})
		}
	})
}

// expectRefusal asserts resp is the protocol error body mb wants.
func expectRefusal(t *testing.T, resp relay.Response, mb malformedBody) {
	t.Helper()
	var body protocol.WireError
	if err := protocol.DecodeStrict(resp.Body, &body); err != nil {
		t.Fatalf("not a protocol error body: %d %.300s (%v)", resp.Status, resp.Body, err)
	}
	if resp.Status != mb.status || body.Error != mb.code {
		t.Fatalf("got %d %s, want %d %s: %.300s", resp.Status, body.Error, mb.status, mb.code, resp.Body)
	}
	if mb.prefix && !strings.HasPrefix(body.Message, mb.message) || !mb.prefix && body.Message != mb.message {
		t.Fatalf("message %q, want %q", body.Message, mb.message)
	}
}

// malformedEndpoints are every endpoint that reads a body: the daemon
// plane and pair, the site plane (pending and results as POSTs, which the
// relay reads a body on), and the stream lane.
func (w *streamWorld) malformedEndpoints() []malformedEndpoint {
	t := w.t
	const schema = "request failed schema validation"
	ceiling := "this message is 7.1 MB and the limit is 6.0 MB"
	daemon := func(endpoint string) malformedEndpoint {
		return malformedEndpoint{name: endpoint, schema: schema, ceiling: ceiling, req: func(raw []byte, q url.Values) relay.Request {
			req := w.daemon.Request(t, endpoint, w.now(), raw)
			req.RawQuery = q.Encode()
			return req
		}}
	}
	site := func(endpoint string) malformedEndpoint {
		return malformedEndpoint{name: "site " + endpoint, schema: schema, ceiling: ceiling, req: func(raw []byte, q url.Values) relay.Request {
			query := url.Values{"siteId": {w.site.SiteID}}
			for k, v := range q {
				query[k] = v
			}
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			protocol.SignSiteRequest(w.site.Keys, endpoint, w.site.SiteID, w.now().UnixMilli(), raw).SetHeaders(h, protocol.HeaderSite)
			return relay.Request{Method: http.MethodPost, Path: "/relay/site/" + endpoint, RawQuery: query.Encode(), Header: h, Body: raw}
		}}
	}
	pending := site("pending")
	pending.schema = ""
	const streamCeiling = "a stream request is at most 64 KiB"
	out := []malformedEndpoint{
		daemon("claim"), daemon("fetch"), daemon("result"), daemon("heartbeat"), daemon("release"),
		{name: "pair", schema: "pair request failed schema validation", ceiling: ceiling, req: func(raw []byte, q url.Values) relay.Request {
			return get("POST", "/byollm/pair", q.Encode(), raw)
		}},
		site("enqueue"), site("payload"), site("cancel"), pending, site("results"),
		{name: "stream append", schema: schema, ceiling: streamCeiling, req: func(raw []byte, q url.Values) relay.Request {
			req := relaytest.SignedDaemonRequest(t, w.daemon.Keys, w.daemon.RunnerID, "append", w.now(), raw)
			req.Path, req.RawQuery = seal.StreamAppendPath, q.Encode()
			return req
		}},
		{name: "stream attach", schema: schema, ceiling: streamCeiling, req: func(raw []byte, q url.Values) relay.Request {
			req := relaytest.SignedSiteRequest(t, w.site.Keys, w.site.SiteID, "attach", w.now(), raw)
			req.Path, req.RawQuery = seal.StreamAttachPath, q.Encode()
			return req
		}},
	}
	return out
}

// malformedSnapshot is everything a refused request could have changed,
// the stream of the running job and the pending pairings included.
type malformedState struct {
	snapshot
	Pairings []store.PendingPairing
	Stream   store.StreamPage
}

func (w *streamWorld) malformedSnapshot() malformedState {
	w.t.Helper()
	pairings, err := w.store.ListPairings(w.ctx, 100)
	if err != nil {
		w.t.Fatal(err)
	}
	log, ok := w.store.(store.StreamLog)
	if !ok {
		w.t.Fatal("the store keeps no stream log")
	}
	page, err := log.ReadFrames(w.ctx, w.site.SiteID, "job-1", w.job.Lease.ID, 0, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(page.Frames) == 0 {
		w.t.Fatal("the running job's stream holds no frame")
	}
	return malformedState{snapshot: w.world.snapshot(), Pairings: pairings, Stream: page}
}

// Under a base path other than /byollm/ there is no version handshake, as
// in the reference, and the body is held to the same rule all the same.
func TestMalformedBodiesUnderACustomBasePath(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f, func(c *relay.Config) { c.BasePath = "/hub/v2" })
		w.enqueue(w.site, "queued", "alice")
		// Paired, so an authenticated call has no presence to rebuild.
		expectStatus(t, w.do(get("POST", "/hub/v2/pair", "", relaytest.Body(t,
			protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: w.daemon.Public()}))), 200)
		before := w.snapshot()
		for _, mb := range malformedBodies() {
			if len(mb.raw) == 0 {
				// No body and no handshake: the schema refuses it.
				mb.code, mb.message = protocol.CodeBadRequest, "request failed schema validation"
			}
			t.Run(mb.name, func(t *testing.T) {
				req := w.daemon.Request(t, "claim", w.now(), mb.raw)
				req.Path = "/hub/v2/claim"
				expectRefusal(t, w.do(req), mb)
				if after := w.snapshot(); !reflect.DeepEqual(after, before) {
					t.Fatal("a refused request changed state")
				}
			})
		}
	})
}
