package relay_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/protocol"
)

// rotatingSecrets is an OriginSecrets whose accepted values a test changes
// between requests, as a rotation in SSM does.
type rotatingSecrets struct {
	mu     sync.Mutex
	values []string
	err    error
}

func (s *rotatingSecrets) set(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values = values
}

func (s *rotatingSecrets) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *rotatingSecrets) get(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values, s.err
}

// through is req as the edge forwards it: with the secret header set to
// each of values (none for a request that went around the edge).
func through(req relay.Request, values ...string) relay.Request {
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del(relay.OriginSecretHeader)
	for _, v := range values {
		h.Add(relay.OriginSecretHeader, v)
	}
	req.Header = h
	return req
}

var edgeOnly = errBody(protocol.CodeForbidden, "this relay answers only through its edge")

func TestOriginLockRefusesRequestsWithoutTheEdgeSecret(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		secrets := &rotatingSecrets{values: []string{"edge-secret-one"}}
		w := newWorld(t, f, func(c *relay.Config) { c.OriginSecrets = secrets.get })
		stub := w.site.Stub("job-1", "alice", w.deadline())
		enqueue := w.site.Request(t, "enqueue", w.now(), protocol.EnqueueRequest{ProtocolVersion: "2", SiteID: w.site.SiteID, Stub: stub})

		refused := map[string]relay.Request{
			"no header":                       enqueue,
			"a wrong secret":                  through(enqueue, "edge-secret-two"),
			"a prefix of the secret":          through(enqueue, "edge-secret"),
			"the secret and a second value":   through(enqueue, "edge-secret-one", "x"),
			"an empty header":                 through(enqueue, ""),
			"an unknown path":                 get("GET", "/readyz", "", nil),
			"a version mismatch":              get("POST", "/byollm/claim", "", []byte(`{"protocolVersion":"99"}`)),
			"the debug page":                  get("GET", "/debug", "site=site-a", nil),
			"a claim signed by a real device": w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 1)),
		}
		for name, req := range refused {
			t.Run(name, func(t *testing.T) {
				expect(t, w.do(req), 403, edgeOnly)
			})
		}

		// Nothing was queued by the refused enqueues: the same enqueue
		// through the edge is the first, and the device claims exactly it.
		expect(t, w.do(through(enqueue, "edge-secret-one")), 200, `{"jobId":"job-1","state":"queued"}`)
		claim := w.do(through(w.daemon.Request(t, "claim", w.now(), claimBody(w.daemon, 5)), "edge-secret-one"))
		expectStatus(t, claim, 200)
		if jobs := decode[protocol.ClaimResponse](t, claim).Jobs; len(jobs) != 1 || jobs[0].ID != "job-1" {
			t.Fatalf("claimed %+v, want job-1 alone", jobs)
		}
		// Behind the lock the relay answers as it always does.
		expect(t, w.do(through(get("GET", "/readyz", "", nil), "edge-secret-one")), 404, `{"error":"not-found"}`)
		w.noSecretsLogged("edge-secret-one")
	})
}

func TestOriginLockAcceptsBothSecretsDuringARotation(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		secrets := &rotatingSecrets{values: []string{"old-secret"}}
		w := newWorld(t, f, func(c *relay.Config) { c.OriginSecrets = secrets.get })
		pending := func(value string) relay.Response {
			return w.do(through(w.site.Request(t, "pending", w.now(), nil), value))
		}
		expectStatus(t, pending("old-secret"), 200)
		expect(t, pending("new-secret"), 403, edgeOnly)

		// The new secret is added: the edge may send either until it has
		// switched everywhere.
		secrets.set("new-secret", "old-secret")
		expectStatus(t, pending("old-secret"), 200)
		expectStatus(t, pending("new-secret"), 200)

		// The old one is retired: refused on the next request.
		secrets.set("new-secret")
		expect(t, pending("old-secret"), 403, edgeOnly)
		expectStatus(t, pending("new-secret"), 200)
	})
}

func TestOriginLockAdmitsNobodyIfItCannotReadSecrets(t *testing.T) {
	secrets := &rotatingSecrets{values: []string{"edge-secret"}}
	w := newWorld(t, factories[0], func(c *relay.Config) { c.OriginSecrets = secrets.get })
	secrets.fail(errors.New("parameter store unreachable"))
	resp := w.do(through(w.site.Request(t, "pending", w.now(), nil), "edge-secret"))
	expect(t, resp, 500, errBody(protocol.CodeServerError, "the relay could not answer this request; try again shortly"))
}

func TestAnEmptySecretOpensNothing(t *testing.T) {
	w := newWorld(t, factories[0], func(c *relay.Config) { c.OriginSecrets = relay.FixedOriginSecrets("") })
	expect(t, w.do(through(w.site.Request(t, "pending", w.now(), nil), "")), 403, edgeOnly)
	expect(t, w.do(w.site.Request(t, "pending", w.now(), nil)), 403, edgeOnly)
}

func TestWithoutALockTheSecretHeaderChangesNothing(t *testing.T) {
	w := newWorld(t, factories[0])
	expectStatus(t, w.do(w.site.Request(t, "pending", w.now(), nil)), 200)
	expectStatus(t, w.do(through(w.site.Request(t, "pending", w.now(), nil), "anything")), 200)
	expect(t, w.do(get("GET", "/readyz", "", nil)), 404, `{"error":"not-found"}`)
}

// What a function serves beside the relay asks the same lock.
func TestPassesOriginLockAnswersAsTheLockDoes(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		open := newWorld(t, f)
		if ok, err := open.relay.PassesOriginLock(t.Context(), http.Header{}); !ok || err != nil {
			t.Fatalf("without a lock: %v %v", ok, err)
		}
		secrets := &rotatingSecrets{values: []string{"edge-secret-one"}}
		locked := newWorld(t, f, func(c *relay.Config) { c.OriginSecrets = secrets.get })
		for _, tc := range []struct {
			sent []string
			want bool
		}{{nil, false}, {[]string{"wrong"}, false}, {[]string{"edge-secret-one", "edge-secret-one"}, false}, {[]string{"edge-secret-one"}, true}} {
			h := http.Header{}
			for _, v := range tc.sent {
				h.Add(relay.OriginSecretHeader, v)
			}
			if ok, err := locked.relay.PassesOriginLock(t.Context(), h); ok != tc.want || err != nil {
				t.Errorf("sent %q: %v %v, want %v", tc.sent, ok, err, tc.want)
			}
		}
		secrets.fail(errors.New("parameter store is down"))
		if ok, err := locked.relay.PassesOriginLock(t.Context(), http.Header{relay.OriginSecretHeader: {"edge-secret-one"}}); ok || err == nil {
			t.Fatalf("a lock that cannot read its secrets admitted: %v %v", ok, err)
		}
	})
}
