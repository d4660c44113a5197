package siteserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/siteserver"
	"github.com/byorelay/byorelay/internal/sitestore"
	"github.com/byorelay/byorelay/internal/sitestore/memory"
	"github.com/byorelay/byorelay/protocol"
)

// eachDirectWorld runs f on the direct lane's world over each site store:
// the memory store and DynamoDB Local.
func eachDirectWorld(t *testing.T, f func(t *testing.T, w *world)) {
	t.Run("memory", func(t *testing.T) {
		f(t, newWorldOn(t, func(clk *clock.Manual) sitestore.Store { return memory.New(memory.Options{Clock: clk}) }))
	})
	t.Run("dynamo", func(t *testing.T) {
		f(t, newWorldOn(t, func(clk *clock.Manual) sitestore.Store { return dynamoSiteStore(t, clk) }))
	})
}

// malformedCase is a body that is not one JSON object in UTF-8 and the
// words every endpoint must refuse it with, as a 400 bad-request.
type malformedCase struct {
	name, raw, message string
}

func malformedCases() []malformedCase {
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	return []malformedCase{
		{"trailing bytes", `{"protocolVersion":"2"} x`, "body has bytes after its JSON value at offset 24"},
		{"a stray closing brace", `{"protocolVersion":"2"}}`, "body has bytes after its JSON value at offset 23"},
		{"BOM", "\xef\xbb\xbf{\"protocolVersion\":\"2\"}", "body starts with a byte-order mark; send the JSON object without one"},
		{"array", `[{"protocolVersion":"2"}]`, "body must be a JSON object, got an array"},
		{"string", `"2"`, "body must be a JSON object, got a string"},
		{"number", `2`, "body must be a JSON object, got a number"},
		{"null", `null`, "body must be a JSON object, got null"},
		{"invalid UTF-8", "{\"protocolVersion\":\"2\",\"x\":\"\xff\"}", "body is not valid UTF-8 at offset 28"},
		{"not JSON", `{"protocolVersion":"2",`, "body is not valid JSON: it ends at offset 23 inside its value"},
		{"empty", ``, "body is empty; it must be a JSON object"},
		{"deeply nested array", deep, "body must be a JSON object, got an array"},
	}
}

// expectMalformed asserts the 400 bad-request with exactly message, or,
// with prefix, a message that starts with it.
func expectMalformed(t *testing.T, resp siteserver.Response, message string, prefix bool) {
	t.Helper()
	assertRefusal(t, resp, http.StatusBadRequest, protocol.CodeBadRequest)
	var body protocol.WireError
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	if prefix && !strings.HasPrefix(body.Message, message) || !prefix && body.Message != message {
		t.Fatalf("message %q, want %q", body.Message, message)
	}
}

// TestMalformedBodiesAreRefusedForWhatIsWrong sends every malformed body to
// every direct-lane daemon endpoint (signed over the exact bytes sent, so
// the refusal is about the body, not the signature), to pair, to every app
// API operation that reads a body and to the admin API, and checks the
// status, the code, the words and that no job, runner or pairing moved.
func TestMalformedBodiesAreRefusedForWhatIsWrong(t *testing.T) {
	eachDirectWorld(t, func(t *testing.T, w *world) {
		resetter, ok := w.store.(sitestore.Resetter)
		if !ok {
			t.Fatal("the store cannot be reset")
		}
		admin := siteserver.NewAdmin(w.srv, resetter, sitestore.NewOffsetClock(w.clock))
		before := w.snapshot()
		// Well-formed and versioned: past the body and the version, refused
		// by the schema after the signature.
		deepObject := `{"protocolVersion":"2","x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`
		type endpoint struct {
			name   string
			send   func(raw string) siteserver.Response
			schema string // the start of its refusal of deepObject
		}
		var endpoints []endpoint
		for _, ep := range []string{"claim", "heartbeat", "fetch", "result", "release"} {
			endpoints = append(endpoints, endpoint{ep, func(raw string) siteserver.Response { return w.call(ep, &w.alice, raw) }, "request body failed schema validation"})
		}
		endpoints = append(endpoints, endpoint{"pair", func(raw string) siteserver.Response { return w.call("pair", nil, raw) }, "pair request failed schema validation"})
		for _, op := range []string{"enqueue", "job", "result", "cancel", "availability", "pairings/pending", "pairings/approve", "pairings/deny", "runners", "runners/revoke", "sweep"} {
			endpoints = append(endpoints, endpoint{"app " + op, func(raw string) siteserver.Response {
				return w.srv.HandleApp(ctx, siteserver.Request{Method: http.MethodPost, Path: "/app/" + op, Header: http.Header{}, Body: []byte(raw)})
			}, "request body failed schema validation: "})
		}
		for _, op := range []string{"clock/advance", "enqueue", "pairings/approve", "runners/revoke", "jobs/cancel", "jobs/get", "availability"} {
			endpoints = append(endpoints, endpoint{"admin " + op, func(raw string) siteserver.Response {
				return admin.Handle(ctx, siteserver.Request{Method: http.MethodPost, Path: "/admin/" + op, Header: http.Header{}, Body: []byte(raw)})
			}, ""})
		}
		for _, ep := range endpoints {
			t.Run(ep.name, func(t *testing.T) {
				for _, c := range malformedCases() {
					t.Run(c.name, func(t *testing.T) {
						expectMalformed(t, ep.send(c.raw), c.message, false)
						if after := w.snapshot(); after != before {
							t.Fatalf("a refused request changed state:\nbefore %s\nafter  %s", before, after)
						}
					})
				}
				t.Run("deeply nested inside an object", func(t *testing.T) {
					expectMalformed(t, ep.send(deepObject), ep.schema, true)
					if after := w.snapshot(); after != before {
						t.Fatalf("a refused request changed state:\nbefore %s\nafter  %s", before, after)
					}
				})
			})
		}
		// An oversized body is refused by its size before anything reads it
		// (the admin API's is bounded by the listener that reads it, serve).
		huge := `{"protocolVersion":"2","x":"` + strings.Repeat("A", siteserver.MaxBodyBytes) + `"}`
		for _, ep := range endpoints {
			if !strings.HasPrefix(ep.name, "admin ") {
				expectMalformed(t, ep.send(huge), "this message is 6.6 MB and the limit is 6.5 MB", true)
			}
		}
		if after := w.snapshot(); after != before {
			t.Fatalf("an oversized request changed state:\nbefore %s\nafter  %s", before, after)
		}
	})
}
