package relay_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/memory"
)

func TestDispatch(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		versioned := []byte(`{"protocolVersion":"2"}`)
		refusal, _ := protocol.Encode(*protocol.CheckVersion(nil, nil))
		cases := []struct {
			name   string
			req    relay.Request
			status int
			body   string
		}{
			{"an unknown path outside the protocol is a bare 404, no version lecture",
				get("GET", "/healthz", "", nil), 404, `{"error":"not-found"}`},
			{"a daemon endpoint name outside the base path is a 404",
				get("POST", "/literally/anything/claim", "", versioned), 404, `{"error":"not-found"}`},
			{"an unknown /byollm/ path with no version is refused for the version first",
				get("POST", "/byollm/nope", "", nil), 400, string(refusal)},
			{"an unknown /byollm/ path with a version is a 404",
				get("POST", "/byollm/nope", "", versioned), 404, `{"error":"not-found"}`},
			{"an unknown /relay/ path with a version in the query is a 404",
				get("GET", "/relay/site/nope", "protocolVersion=2", nil), 404, `{"error":"not-found"}`},
			{"a claim with no version is refused before auth",
				get("POST", "/byollm/claim", "", []byte(`{"runnerId":"x"}`)), 400, string(refusal)},
			{"malformed JSON is a bad request that says where, not a missing version",
				get("POST", "/byollm/claim", "", []byte(`{`)), 400, errBody("bad-request", "body is not valid JSON: it ends at offset 1 inside its value")},
			{"an empty POST body is no body: the version is the query's",
				get("POST", "/byollm/claim", "", []byte{}), 400, string(refusal)},
			{"a GET body is never read, so its version does not count",
				get("GET", "/byollm/claim", "", versioned), 400, string(refusal)},
			{"a nested last segment under the base path dispatches on it",
				get("POST", "/byollm/anything/claim", "", versioned), 401, errBody("unauthorized", "this request is not signed")},
			{"any verb reaches a route",
				get("PUT", "/byollm/claim", "protocolVersion=2", nil), 401, errBody("unauthorized", "this request is not signed")},
			{"the site plane needs its exact path",
				get("POST", "/relay/site/enqueue", "", versioned), 401, errBody("unauthorized", "this request is not signed")},
			{"the site plane is not under the base path",
				get("POST", "/byollm/site/enqueue", "", versioned), 404, `{"error":"not-found"}`},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				resp := w.do(c.req)
				expect(t, resp, c.status, c.body)
				expectStatus(t, resp, c.status)
			})
		}
	})
}

func TestVersionRefusalNamesTheDisagreement(t *testing.T) {
	w := newWorld(t, factories[0])
	cases := []struct {
		name, body, message string
	}{
		{"older", `{"protocolVersion":"1"}`, "this server speaks protocol 2 and the daemon asked for 1. Upgrade the daemon: `npm i -g byollm@latest`."},
		{"newer", `{"protocolVersion":"3"}`, "this server speaks protocol 2 and the daemon asked for 3. This daemon is newer than the server; the server needs upgrading."},
		{"numeric", `{"protocolVersion":2}`, "this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := w.do(get("POST", "/byollm/heartbeat", "", []byte(c.body)))
			want := `{"error":"unsupported-protocol-version","message":` + encodeJS(t, c.message) + `,"supported":["2"],"minimum":"2"}`
			expect(t, resp, 400, want)
		})
	}
}

func TestCustomBasePath(t *testing.T) {
	w := newWorld(t, factories[0], func(c *relay.Config) { c.BasePath = "/hub/v2//" })
	d := w.daemon
	req := d.Request(t, "claim", w.now(), claimBody(d, 1))
	req.Path = "/hub/v2/claim"
	expectStatus(t, w.do(req), 200)
	// The version check still keys on the literal /byollm/ prefix, and the
	// daemon plane is no longer there.
	expect(t, w.do(get("POST", "/byollm/claim", "", []byte(`{"protocolVersion":"2"}`))), 404, `{"error":"not-found"}`)
	expect(t, w.do(get("POST", "/hub/v2/nope", "", nil)), 404, `{"error":"not-found"}`)
}

func TestOversizedBodyIsRefusedBeforeParsing(t *testing.T) {
	w := newWorld(t, factories[0])
	body := []byte(`{"protocolVersion":"2","pad":"` + strings.Repeat("a", relay.MaxBodyBytes) + `"}`)
	resp := w.do(get("POST", "/byollm/claim", "", body))
	if resp.Status != 400 || !strings.Contains(string(resp.Body), `"error":"bad-request"`) || !strings.Contains(string(resp.Body), "Every plan has the same ceiling.") {
		t.Fatalf("got %d %s", resp.Status, resp.Body)
	}
}

func TestHeadersAreReadCaseInsensitively(t *testing.T) {
	w := newWorld(t, factories[0])
	req := w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1))
	lower := http.Header{}
	for k, vs := range req.Header {
		lower[strings.ToLower(k)] = vs
	}
	req.Header = lower
	expectStatus(t, w.do(req), 200)
}

type failingProjection struct{}

func (failingProjection) Projection(context.Context) (*projection.Projection, error) {
	return nil, errors.New("control plane unreachable")
}

func (failingProjection) Scoped(context.Context, projection.Query) (*projection.Projection, error) {
	return nil, errors.New("control plane unreachable")
}

func TestAFailedDependencyIsA500ThatNamesNothing(t *testing.T) {
	r, err := relay.New(relay.Config{Store: memory.New(storeOptions()), Projection: failingProjection{}})
	if err != nil {
		t.Fatal(err)
	}
	resp := r.Handle(context.Background(), relay.Request{Method: "POST", Path: "/byollm/claim", Header: http.Header{}, Body: []byte(`{"protocolVersion":"2"}`)})
	expect(t, resp, 500, errBody("server-error", "the relay could not answer this request; try again shortly"))
}

func TestNewRefusesGrantsWithoutAnAuthor(t *testing.T) {
	_, err := relay.New(relay.Config{Store: memory.New(storeOptions()), Projection: relay.NewStaticProjection(nil), ControlPlanePublic: "cp-key"})
	if !errors.Is(err, relay.ErrGrantsWithoutAuthor) {
		t.Fatalf("got %v", err)
	}
	if err.Error() != "controlPlanePublic is set but authorGrant is not: devices would be told to expect signed grants that nothing here can produce, and would refuse every job" {
		t.Fatalf("message %q", err)
	}
}
