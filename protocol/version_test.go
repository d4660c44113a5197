package protocol

import (
	"net/url"
	"testing"
)

func TestVectorVersionRefusals(t *testing.T) {
	cases := []struct {
		vector string
		body   string
	}{
		{"versionRefusal", `{"protocolVersion":"0"}`},
		{"versionRefusalMissing", `{}`},
	}
	for _, tc := range cases {
		refusal := CheckVersion([]byte(tc.body), nil)
		if refusal == nil {
			t.Fatalf("%s: accepted", tc.body)
		}
		if got, want := mustEncode(t, refusal), string(wireVector(t, tc.vector)); got != want {
			t.Fatalf("%s\n got  %s\n want %s", tc.vector, got, want)
		}
		if err := refusal.Validate(); err != nil {
			t.Fatalf("%s: the refusal is not a valid WireError: %v", tc.vector, err)
		}
		if StatusOf(refusal.Error) != 400 {
			t.Fatalf("served with %d", StatusOf(refusal.Error))
		}
	}
}

func TestCheckVersion(t *testing.T) {
	const missing = "this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`."
	cases := []struct {
		name  string
		body  string
		query string
		want  string // "" accepts
	}{
		{"the body's version", `{"protocolVersion":"2"}`, "", ""},
		{"the query's version when the body has none", ``, "siteId=s&protocolVersion=2", ""},
		{"the query's version when the body is not JSON", `{nope`, "protocolVersion=2", ""},
		{"the query's version when the body is an array", `["protocolVersion"]`, "protocolVersion=2", ""},
		{"the body wins over the query", `{"protocolVersion":"1"}`, "protocolVersion=2",
			"this server speaks protocol 2 and the daemon asked for 1. Upgrade the daemon: `npm i -g byollm@latest`."},
		{"a body null version does not fall back to the query", `{"protocolVersion":null}`, "protocolVersion=2", missing},
		{"the first query value is read", ``, "protocolVersion=3&protocolVersion=2",
			"this server speaks protocol 2 and the daemon asked for 3. This daemon is newer than the server; the server needs upgrading."},
		{"a nested version does not count", `{"stub":{"protocolVersion":"2"}}`, "", missing},
		{"a number version", `{"protocolVersion":2}`, "", missing},
		{"an empty version", `{"protocolVersion":""}`, "", missing},
		{"an empty query version", ``, "protocolVersion=", missing},
		{"nothing at all", ``, "", missing},
		{"a newer version, compared as strings", `{"protocolVersion":"10"}`, "",
			"this server speaks protocol 2 and the daemon asked for 10. Upgrade the daemon: `npm i -g byollm@latest`."},
		{"a duplicate key, last wins", `{"protocolVersion":"2","protocolVersion":"99"}`, "",
			"this server speaks protocol 2 and the daemon asked for 99. This daemon is newer than the server; the server needs upgrading."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			refusal := CheckVersion([]byte(tc.body), q)
			switch {
			case tc.want == "" && refusal != nil:
				t.Fatalf("refused: %s", refusal.Message)
			case tc.want != "" && refusal == nil:
				t.Fatal("accepted")
			case tc.want != "" && refusal.Message != tc.want:
				t.Fatalf("message\n got  %s\n want %s", refusal.Message, tc.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"0.1.1", "0.1.1", 0, true},
		{"0.1.0", "0.1.1", -1, true},
		{"1.0.0", "0.9.9", 1, true},
		{"0.1.0-alpha.83", "0.1.0", -1, true},
		{"0.1.0", "0.1.0-alpha.83", 1, true},
		{"0.1.0-alpha.9", "0.1.0-alpha.83", -1, true},
		{"0.1.0-alpha.83", "0.1.0-alpha", 1, true},
		{"0.1.0-1", "0.1.0-alpha", -1, true},
		{"0.1.0-beta", "0.1.0-alpha", 1, true},
		{"0.1.0+build.5", "0.1.0", 0, true},
		{"v0.1.0", "0.1.0", 0, false},
		{"0.1", "0.1.0", 0, false},
	}
	for _, tc := range cases {
		got, ok := CompareVersions(tc.a, tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckDaemonFloor(t *testing.T) {
	if CheckDaemonFloor("0.1.1", "0.1.1") != nil {
		t.Error("a daemon at the floor was refused")
	}
	if CheckDaemonFloor("dev-build", "0.1.1") != nil {
		t.Error("an unparseable version was refused")
	}
	refusal := CheckDaemonFloor("0.1.0-alpha.90", "0.1.0")
	if refusal == nil {
		t.Fatal("a prerelease of the floor was accepted")
	}
	if err := refusal.Validate(); err != nil {
		t.Fatal(err)
	}
	if StatusOf(refusal.Error) != 426 {
		t.Fatalf("served with %d, want 426", StatusOf(refusal.Error))
	}
}

func TestUpdateOfferFor(t *testing.T) {
	cases := []struct{ offer, daemon, want string }{
		{"", "0.1.1", ""},
		{"0.1.2", "0.1.1", "0.1.2"},
		{"0.1.2", "0.1.2", ""},
		{"0.1.2", "0.1.0-alpha.82", ""},
		{"0.1.2", "0.1.0-alpha.83", "0.1.2"},
		{"latest", "0.1.1", ""},
		{"0.1.2", "garbage", ""},
	}
	for _, tc := range cases {
		if got := UpdateOfferFor(tc.offer, tc.daemon); got != tc.want {
			t.Errorf("UpdateOfferFor(%q, %q) = %q, want %q", tc.offer, tc.daemon, got, tc.want)
		}
	}
}

func TestStatusOfEveryCode(t *testing.T) {
	want := map[string]int{
		"bad-request": 400, "unsupported-protocol-version": 400, "daemon-below-floor": 426,
		"unauthorized": 401, "forbidden": 403, "revoked": 403, "not-found": 404, "not-ready": 409,
		"too-late": 409, "clock-skew": 401, "rate-limited": 429, "server-error": 500,
	}
	if len(want) != len(WireErrorCodes) {
		t.Fatalf("%d codes, table has %d", len(WireErrorCodes), len(want))
	}
	for _, code := range WireErrorCodes {
		if got := StatusOf(code); got != want[code] {
			t.Errorf("StatusOf(%q) = %d, want %d", code, got, want[code])
		}
	}
}
