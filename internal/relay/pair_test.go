package relay_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/relay"
	"github.com/byorelay/byorelay/internal/relay/relaytest"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store"
)

// pairFixture pairs d through the fixture exchange and asserts success.
func pairFixture(t *testing.T, w *world, d *relaytest.Daemon) protocol.PairFixtureResponse {
	t.Helper()
	resp := w.do(get("POST", "/byollm/pair", "", relaytest.Body(t, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: d.Owner, Device: d.Public()})))
	expectStatus(t, resp, 200)
	return decode[protocol.PairFixtureResponse](t, resp)
}

func pairPost(t *testing.T, w *world, body any) relay.Response {
	t.Helper()
	return w.do(get("POST", "/byollm/pair", "", relaytest.Body(t, body)))
}

func startBody(d *relaytest.Daemon) protocol.PairStartRequest {
	return protocol.PairStartRequest{
		ProtocolVersion: "2", Action: "start",
		Daemon:       protocol.DaemonInfo{Version: "0.1.1", Label: "laptop", Platform: "linux"},
		Device:       d.Public(),
		Capabilities: capabilities("llm.generate"),
	}
}

func pollBody(code string) protocol.PairPollRequest {
	return protocol.PairPollRequest{ProtocolVersion: "2", Action: "poll", DeviceCode: code}
}

func TestFixturePairing(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("pairs an approved device and hands back the sites' keys, never the relay's", func(t *testing.T) {
			w := newWorld(t, f)
			resp := pairPost(t, w, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: w.daemon.Public()})
			want := `{"protocolVersion":"2","runnerId":"runner-1","sites":{"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `}}`
			expect(t, resp, 200, want)
			p, found, err := w.store.Presence(w.ctx, "runner-1")
			if err != nil || !found || p.Owner != "alice" || len(p.Capabilities) != 0 {
				t.Fatalf("presence %+v %v %v", p, found, err)
			}
		})
		t.Run("a paused consent keeps its pin", func(t *testing.T) {
			w := newWorld(t, f)
			w.project(w.base().Paused("alice", "site-a"))
			if got := pairFixture(t, w, w.daemon); len(got.Sites) != 1 {
				t.Fatalf("sites %+v", got.Sites)
			}
		})
		t.Run("sites come sorted by site id and carry the control plane key when configured", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) {
				c.ControlPlanePublic = "cp-public"
				c.AuthorGrant = grantAll
			})
			b := relaytest.NewSite(t, "b-site")
			a := relaytest.NewSite(t, "a-site")
			w.project(relaytest.NewFixture().Site(w.site, b, a).Device(w.daemon).Consent("alice", "site-a").Consent("alice", "b-site").Consent("alice", "a-site"))
			resp := pairPost(t, w, protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: w.daemon.Public()})
			want := `{"protocolVersion":"2","runnerId":"runner-1","sites":{"` + a.KeyID() + `":` + encodeJS(t, a.Public()) +
				`,"` + b.KeyID() + `":` + encodeJS(t, b.Public()) +
				`,"` + w.site.KeyID() + `":` + encodeJS(t, w.site.Public()) + `},"controlPlanePublic":"cp-public"}`
			expect(t, resp, 200, want)
		})
		t.Run("refusals", func(t *testing.T) {
			w := newWorld(t, f)
			other := relaytest.NewDaemon(t, "runner-b", "bob")
			w.project(w.base().Device(other).Consent("alice", "site-a").Consent("bob", "site-a").Consent("carol", "site-a"))
			stranger := relaytest.NewDaemon(t, "runner-s", "alice")
			broken := w.daemon.Public()
			broken.EncryptionSig = other.Public().EncryptionSig
			cases := []struct {
				name   string
				body   any
				status int
				want   string
			}{
				{"a malformed body", `{"protocolVersion":"2","owner":"alice"}`, 400, errBody("bad-request", "pair request failed schema validation")},
				{"a malformed start falls through to the same refusal", `{"protocolVersion":"2","action":"start"}`, 400, errBody("bad-request", "pair request failed schema validation")},
				{"an inconsistent identity", protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: broken}, 400, errBody("bad-request", "the device identity is not consistent")},
				{"no consent", protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "dave", Device: w.daemon.Public()}, 403, errBody("forbidden", "no consent record for this user")},
				{"an unapproved device", protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "alice", Device: stranger.Public()}, 403, errBody("forbidden", "this device has not been approved by its owner")},
				{"another owner's device", protocol.PairFixtureRequest{ProtocolVersion: "2", Owner: "carol", Device: other.Public()}, 403, errBody("forbidden", "this device belongs to another owner")},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					expect(t, pairPost(t, w, c.body), c.status, c.want)
				})
			}
			if all, _ := w.store.Everyone(w.ctx); len(all) != 0 {
				t.Fatalf("a refused pairing recorded presence: %+v", all)
			}
		})
	})
}

var userCodePattern = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$`)

func TestDeviceCodePairing(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("start, pending, approved, then the code is spent", func(t *testing.T) {
			w := newWorld(t, f)
			newcomer := relaytest.NewDaemon(t, "runner-new", "alice")
			resp := pairPost(t, w, startBody(newcomer))
			expectStatus(t, resp, 200)
			started := decode[protocol.PairStartResponse](t, resp)
			if len(started.DeviceCode) != 43 || !userCodePattern.MatchString(started.UserCode) ||
				started.VerificationURL != "https://control.example/pair" || started.ExpiresAt != w.nowMs()+600_000 || started.PollIntervalMs != 2000 {
				t.Fatalf("start %+v", started)
			}
			want := `{"deviceCode":"` + started.DeviceCode + `","userCode":"` + started.UserCode + `","verificationUrl":"https://control.example/pair","expiresAt":` + relaytest.Ms(w.now().Add(600_000_000_000)) + `,"pollIntervalMs":2000}`
			expect(t, resp, 200, want)

			expect(t, pairPost(t, w, pollBody(started.DeviceCode)), 200, `{"status":"pending"}`)

			// A human approves it in the control plane; the projection catches up.
			w.project(w.base().Device(newcomer).Consent("alice", "site-a"))
			resp = pairPost(t, w, pollBody(started.DeviceCode))
			expect(t, resp, 200, `{"status":"approved","runnerId":"runner-new","owner":"alice","sites":{"`+w.site.KeyID()+`":`+encodeJS(t, w.site.Public())+`}}`)
			p, found, err := w.store.Presence(w.ctx, "runner-new")
			if err != nil || !found || len(p.Capabilities) != 1 || p.Capabilities[0].Kind != "llm.generate" {
				t.Fatalf("presence %+v %v %v", p, found, err)
			}
			expect(t, pairPost(t, w, pollBody(started.DeviceCode)), 200, `{"status":"expired"}`)
		})
		t.Run("approved with nothing consented is still approved, with an empty set", func(t *testing.T) {
			w := newWorld(t, f)
			newcomer := relaytest.NewDaemon(t, "runner-new", "zed")
			started := decode[protocol.PairStartResponse](t, pairPost(t, w, startBody(newcomer)))
			w.project(w.base().Device(newcomer))
			expect(t, pairPost(t, w, pollBody(started.DeviceCode)), 200, `{"status":"approved","runnerId":"runner-new","owner":"zed","sites":{}}`)
		})
		t.Run("unknown and expired codes answer alike", func(t *testing.T) {
			w := newWorld(t, f)
			started := decode[protocol.PairStartResponse](t, pairPost(t, w, startBody(w.daemon)))
			expect(t, pairPost(t, w, pollBody("a-code-nobody-ever-minted-here")), 200, `{"status":"expired"}`)
			w.advance(600_000)
			expect(t, pairPost(t, w, pollBody(started.DeviceCode)), 200, `{"status":"expired"}`)
		})
		t.Run("one code per keypair: a restart replaces the old code", func(t *testing.T) {
			w := newWorld(t, f)
			first := decode[protocol.PairStartResponse](t, pairPost(t, w, startBody(w.daemon)))
			second := decode[protocol.PairStartResponse](t, pairPost(t, w, startBody(w.daemon)))
			expect(t, pairPost(t, w, pollBody(first.DeviceCode)), 200, `{"status":"expired"}`)
			if resp := pairPost(t, w, pollBody(second.DeviceCode)); resp.Status != 200 || string(resp.Body) == `{"status":"expired"}` {
				t.Fatalf("second code %s", resp.Body)
			}
		})
		t.Run("keeps what the operator is shown, with an absurd daemon version cut short", func(t *testing.T) {
			w := newWorld(t, f)
			body := startBody(w.daemon)
			started := decode[protocol.PairStartResponse](t, pairPost(t, w, body))
			p, found, err := w.store.PairingByUserCode(w.ctx, started.UserCode)
			if err != nil || !found || p.DaemonVersion != "0.1.1" || p.Label != "laptop" || p.Platform != "linux" {
				t.Fatalf("stored %+v %v %v", p, found, err)
			}
			other := relaytest.NewDaemon(t, "other", "alice")
			body = startBody(other)
			body.Daemon.Version = strings.Repeat("9", 100_000)
			started = decode[protocol.PairStartResponse](t, pairPost(t, w, body))
			p, found, err = w.store.PairingByUserCode(w.ctx, started.UserCode)
			if err != nil || !found || p.DaemonVersion != strings.Repeat("9", 64)+"…" {
				t.Fatalf("stored a %d-byte version: %v %v", len(p.DaemonVersion), found, err)
			}
		})
		t.Run("an inconsistent identity is refused", func(t *testing.T) {
			w := newWorld(t, f)
			body := startBody(w.daemon)
			body.Device.EncryptionSig = relaytest.NewDaemon(t, "x", "y").Public().EncryptionSig
			expect(t, pairPost(t, w, body), 400, errBody("bad-request", "the device identity is not consistent"))
		})
		t.Run("without a verification URL the flow is unsupported", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.VerificationURL = "" })
			expect(t, pairPost(t, w, startBody(w.daemon)), 501, errBody("bad-request", "this relay does not offer device-code pairing"))
		})
		t.Run("without a code store both halves are unsupported", func(t *testing.T) {
			w := newWorld(t, f, func(c *relay.Config) { c.Pairing = nil })
			expect(t, pairPost(t, w, startBody(w.daemon)), 501, errBody("bad-request", "this relay does not offer device-code pairing"))
			expect(t, pairPost(t, w, pollBody("a-code-nobody-ever-minted-here")), 501, errBody("bad-request", "this relay does not offer device-code pairing"))
		})
	})
}

func TestPairingAtCapacityIsRateLimited(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		small := f.new(t, store.Options{Clock: w.clock, PairingCapacity: 2})
		w.rebuild(func(c *relay.Config) { c.Pairing = small })
		for i := range 2 {
			d := relaytest.NewDaemon(t, "r", "o")
			if resp := pairPost(t, w, startBody(d)); resp.Status != 200 {
				t.Fatalf("pairing %d: %d %s", i, resp.Status, resp.Body)
			}
		}
		third := relaytest.NewDaemon(t, "r", "o")
		expect(t, pairPost(t, w, startBody(third)), 429, errBody("rate-limited", store.PairingBusyMessage))
		// The cap cannot latch: ten minutes later the old codes are gone.
		w.advance(600_000)
		expectStatus(t, pairPost(t, w, startBody(third)), 200)
	})
}

// pairFrom is a pair start for d sent from the address source.
func pairFrom(t *testing.T, w *world, source string, d *relaytest.Daemon) relay.Response {
	t.Helper()
	req := get("POST", "/byollm/pair", "", relaytest.Body(t, startBody(d)))
	req.SourceIP = source
	return w.do(req)
}

var throttledBody = errBody("rate-limited", "too many pairings have been started from here — try again in a minute")

// A flood of pair starts from one address is throttled long before it
// reaches the ceiling of 500 live codes, so everybody else can still pair;
// the ceiling itself still holds against many addresses.
func TestOneSourcesPairingFloodStopsShortOfTheCeiling(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		accepted := 0
		for i := range store.MaxOutstandingPairings + 100 {
			resp := pairFrom(t, w, "203.0.113.7", relaytest.NewDaemon(t, "r", "o"))
			switch {
			case resp.Status == 200:
				accepted++
			case string(resp.Body) != throttledBody || resp.Status != 429:
				t.Fatalf("start %d: %d %s", i, resp.Status, resp.Body)
			}
		}
		if accepted != 20 {
			t.Fatalf("one source started %d pairings at once, want its burst of 20", accepted)
		}
		// Somebody else is not shut out.
		expectStatus(t, pairFrom(t, w, "198.51.100.1", relaytest.NewDaemon(t, "r", "o")), 200)
		// The flooding source gets one more every 30 s, no sooner.
		w.advance(29_999)
		expect(t, pairFrom(t, w, "203.0.113.7", relaytest.NewDaemon(t, "r", "o")), 429, throttledBody)
		w.advance(1)
		expectStatus(t, pairFrom(t, w, "203.0.113.7", relaytest.NewDaemon(t, "r", "o")), 200)
	})
}

func TestOneKeyRestartingPairingIsThrottledAnywhere(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		d := relaytest.NewDaemon(t, "r", "o")
		for i := range 5 {
			expectStatus(t, pairFrom(t, w, "192.0.2."+strconv.Itoa(i), d), 200)
		}
		expect(t, pairFrom(t, w, "192.0.2.99", d), 429, throttledBody)
		w.advance(60_000)
		expectStatus(t, pairFrom(t, w, "192.0.2.99", d), 200)
	})
}

func TestTheCeilingStillHoldsAgainstManySources(t *testing.T) {
	eachStore(t, func(t *testing.T, f storeFactory) {
		w := newWorld(t, f)
		small := f.new(t, store.Options{Clock: w.clock, PairingCapacity: 30})
		w.rebuild(func(c *relay.Config) { c.Pairing = small })
		for i := range 30 {
			expectStatus(t, pairFrom(t, w, "192.0.2."+strconv.Itoa(i), relaytest.NewDaemon(t, "r", "o")), 200)
		}
		expect(t, pairFrom(t, w, "192.0.2.200", relaytest.NewDaemon(t, "r", "o")), 429, errBody("rate-limited", store.PairingBusyMessage))
	})
}

// Served straight over net/http (`byorelay serve --store memory`), the
// caller is the connection's peer: a flood from one address is throttled
// there too, and a forwarding header the caller writes names nobody.
func TestOverPlainHTTPThePairingThrottleCountsThePeer(t *testing.T) {
	w := newWorld(t, factories[0])
	srv := httptest.NewServer(w.relay.HTTPHandler())
	defer srv.Close()
	accepted := 0
	for i := range 25 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/byollm/pair",
			bytes.NewReader(relaytest.Body(t, startBody(relaytest.NewDaemon(t, "r", "o")))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", "192.0.2."+strconv.Itoa(i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 200:
			accepted++
		case resp.StatusCode != 429 || string(body) != throttledBody:
			t.Fatalf("start %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if accepted != 20 {
		t.Fatalf("one loopback peer started %d pairings, want its burst of 20", accepted)
	}
}
