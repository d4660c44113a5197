package relay_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/store"
)

// The pairing throttle behind the edge
// (docs/decisions/0009-pairing-throttle.md): with an origin lock, a request that passed it is counted by
// CloudFront-Viewer-Address; without one, that header is nobody's word.

const (
	// edgeSecret is the origin secret of a world behind the edge.
	edgeSecret = "edge-secret-for-viewers"
	// egress is a CloudFront egress address: API Gateway's source address
	// for every viewer the same edge server forwards.
	egress = "130.176.1.1"
)

func behindTheEdge(c *relay.Config) { c.OriginSecrets = relay.FixedOriginSecrets(edgeSecret) }

// startVia is a pair start for d from the source address source, carrying
// the origin secret when secret is not "", and one CloudFront-Viewer-Address
// header value per viewer.
func startVia(t *testing.T, w *world, source, secret string, d *relaytest.Daemon, viewer ...string) relay.Response {
	t.Helper()
	req := get("POST", "/byollm/pair", "", relaytest.Body(t, startBody(d)))
	req.SourceIP = source
	if secret != "" {
		req = through(req, secret)
	}
	for _, v := range viewer {
		req.Header.Add(relay.ViewerAddressHeader, v)
	}
	return w.do(req)
}

// edgeStart is a pair start as the edge forwards it: from its egress
// address, with its secret, and the viewer's address as CloudFront writes
// it (or none).
func edgeStart(t *testing.T, w *world, d *relaytest.Daemon, viewer ...string) relay.Response {
	t.Helper()
	return startVia(t, w, egress, edgeSecret, d, viewer...)
}

// starts sends n pair starts, each from a new device, and counts the ones
// that got a code; every other answer must be the throttle's 429.
func starts(t *testing.T, n int, start func(i int, d *relaytest.Daemon) relay.Response) int {
	t.Helper()
	accepted := 0
	for i := range n {
		resp := start(i, relaytest.NewDaemon(t, "r", "o"))
		switch {
		case resp.Status == 200:
			accepted++
		case resp.Status != 429 || string(resp.Body) != throttledBody:
			t.Fatalf("start %d: %d %s", i, resp.Status, resp.Body)
		}
	}
	return accepted
}

func TestBehindTheEdgeEachViewerHasItsOwnPairingBucket(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f, behindTheEdge)
		// Room for exactly two bursts: a throttled start that stored a code
		// would leave the second viewer short of its twenty.
		small := f.new(t, store.Options{Clock: w.clock, PairingCapacity: 2 * 20})
		w.rebuild(func(c *relay.Config) { c.Pairing = small })

		// One viewer floods through the edge: its burst of 20, then 429s.
		flood := starts(t, 40, func(i int, d *relaytest.Daemon) relay.Response {
			return edgeStart(t, w, d, fmt.Sprintf("198.51.100.7:%d", 40000+i))
		})
		if flood != 20 {
			t.Fatalf("one viewer started %d pairings, want its burst of 20", flood)
		}
		if !strings.Contains(w.logs.String(), `"decision":"refuse-pairing-throttled","caller":"198.51.100.7","sourceIP":"`+egress+`"`) {
			t.Fatalf("the throttled start did not log the viewer and the edge:\n%s", w.logs)
		}
		// Another viewer behind the same egress address is not shut out:
		// it has its own bucket, whole.
		other := starts(t, 21, func(i int, d *relaytest.Daemon) relay.Response {
			return edgeStart(t, w, d, fmt.Sprintf("198.51.100.8:%d", 50000+i))
		})
		if other != 20 {
			t.Fatalf("a second viewer through the same edge address started %d pairings, want 20", other)
		}
		// The flooding viewer gets one more every 30 s, no sooner.
		w.advance(29_999)
		expect(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), "198.51.100.7:1"), 429, throttledBody)
	})
}

func TestBehindTheEdgeAnIPv6ViewerIsCountedByItsSlash64(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f, behindTheEdge)
		// Twenty addresses of one /64, as CloudFront writes them: unbracketed,
		// the port after the last colon.
		inOne64 := starts(t, 21, func(i int, d *relaytest.Daemon) relay.Response {
			return edgeStart(t, w, d, fmt.Sprintf("2001:db8:1:2::%x:443", i+1))
		})
		if inOne64 != 20 {
			t.Fatalf("one /64 started %d pairings, want one burst of 20", inOne64)
		}
		// The same /64 spelled in full, or bracketed, is the same bucket.
		expect(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), "2001:0db8:0001:0002:ffff:ffff:ffff:ffff:8443"), 429, throttledBody)
		expect(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), "[2001:db8:1:2::99]:443"), 429, throttledBody)
		// The next /64 is another subscriber.
		expectStatus(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), "2001:db8:1:3::1:443"), 200)
	})
}

func TestWithoutOriginLockTheViewerHeaderChangesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		// A client naming a new viewer address on every start still drains
		// its own source address's bucket.
		accepted := starts(t, 25, func(i int, d *relaytest.Daemon) relay.Response {
			return startVia(t, w, "203.0.113.7", "", d, fmt.Sprintf("198.51.100.%d:443", i+1))
		})
		if accepted != 20 {
			t.Fatalf("a source naming other viewers started %d pairings, want its own burst of 20", accepted)
		}
		expect(t, startVia(t, w, "203.0.113.7", "", relaytest.NewDaemon(t, "r", "o")), 429, throttledBody)
		// And naming the throttled address as its own puts nobody in its bucket.
		expectStatus(t, startVia(t, w, "203.0.113.8", "", relaytest.NewDaemon(t, "r", "o"), "203.0.113.7:443"), 200)
	})
}

func TestAMalformedViewerAddressCountsAsTheEdges(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f, behindTheEdge)
		// Without a viewer address the edge's own address is the caller:
		// drain its bucket, so every fallback below is throttled.
		if n := starts(t, 21, func(_ int, d *relaytest.Daemon) relay.Response { return edgeStart(t, w, d) }); n != 20 {
			t.Fatalf("the edge's address started %d pairings, want 20", n)
		}
		malformed := map[string][]string{
			"an empty value":               {""},
			"no port":                      {"198.51.100.7"},
			"an empty port":                {"198.51.100.7:"},
			"a port out of range":          {"198.51.100.7:65536"},
			"a signed port":                {"198.51.100.7:+443"},
			"a port that is not a number":  {"198.51.100.7:44x"},
			"a host name":                  {"viewer.example:443"},
			"an IPv6 address without port": {"2001:db8::"},
			"a bad IPv6 address":           {"2001:db8::zz:443"},
			"a bracketed IPv4 address":     {"[198.51.100.7]:443"},
			"a zone":                       {"fe80::1%eth0:443"},
			"a leading space":              {" 198.51.100.7:443"},
			"two values joined by a comma": {"198.51.100.7:443, 198.51.100.8:443"},
			"two header lines":             {"198.51.100.7:443", "198.51.100.8:443"},
		}
		for name, values := range malformed {
			t.Run(name, func(t *testing.T) {
				expect(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), values...), 429, throttledBody)
			})
		}
		// A well-formed one is the viewer's own bucket.
		expectStatus(t, edgeStart(t, w, relaytest.NewDaemon(t, "r", "o"), "198.51.100.7:443"), 200)
	})
}

// A start the origin lock refuses is answered before anything reads it:
// it spends no token from the bucket of the viewer it names.
func TestAStartTheOriginLockRefusesSpendsNoViewersToken(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f, behindTheEdge)
		for _, secret := range []string{"", "not-the-edge-secret"} {
			for range 15 {
				expect(t, startVia(t, w, "203.0.113.9", secret, relaytest.NewDaemon(t, "r", "o"), "198.51.100.7:443"), 403, edgeOnly)
			}
		}
		accepted := starts(t, 21, func(_ int, d *relaytest.Daemon) relay.Response {
			return edgeStart(t, w, d, "198.51.100.7:443")
		})
		if accepted != 20 {
			t.Fatalf("after 30 refused starts the viewer started %d pairings, want its whole burst of 20", accepted)
		}
	})
}
