package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"testing"
)

const testNow = 1800000000000

func newTestKeys(t testing.TB) *Keys {
	t.Helper()
	k, err := GenerateKeys()
	if err != nil {
		t.Fatalf("GenerateKeys: %v", err)
	}
	return k
}

func TestCanonicalRequestIsTheExactSignedString(t *testing.T) {
	got := string(CanonicalRequest("claim", "runner_1", 1800000000000, []byte(`{"max":4}`)))
	want := "byollm/v1/request\nclaim\nrunner_1\n1800000000000\n" + sha256Hex([]byte(`{"max":4}`))
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	empty := string(CanonicalRequest("site/pending", "site_demo", 1, nil))
	if want := "byollm/v1/request\nsite/pending\nsite_demo\n1\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; empty != want {
		t.Fatalf("empty body: got %q", empty)
	}
}

func TestVerifyRequestAcceptsItsOwnSignature(t *testing.T) {
	k := newTestKeys(t)
	body := []byte(`{"protocolVersion":"2","runnerId":"runner_1"}`)
	sig := SignRequest(k, "heartbeat", "runner_1", testNow, body)
	if err := VerifyRequest(k.Public().Identity, "heartbeat", body, sig, testNow+5000); err != nil {
		t.Fatalf("daemon: %v", err)
	}
	siteSig := SignSiteRequest(k, "enqueue", "site_demo", testNow, body)
	if err := VerifySiteRequest(k.Public().Identity, "enqueue", body, siteSig, testNow); err != nil {
		t.Fatalf("site: %v", err)
	}
}

func TestVerifyRequestRefusesEveryChangedField(t *testing.T) {
	k := newTestKeys(t)
	other := newTestKeys(t)
	body := []byte(`{"jobId":"job_1"}`)
	sig := SignRequest(k, "result", "runner_1", testNow, body)
	id := k.Public().Identity

	tests := []struct {
		name     string
		identity string
		endpoint string
		body     []byte
		sig      RequestSignature
	}{
		{"another endpoint", id, "release", body, sig},
		{"the site plane's near-namesake", id, "results", body, sig},
		{"another body", id, "result", []byte(`{"jobId":"job_2"}`), sig},
		{"a body with a trailing newline", id, "result", append(body, '\n'), sig},
		{"another caller", id, "result", body, RequestSignature{CallerID: "runner_2", IssuedAt: sig.IssuedAt, Signature: sig.Signature}},
		{"another issuedAt inside the window", id, "result", body, RequestSignature{CallerID: sig.CallerID, IssuedAt: sig.IssuedAt + 1, Signature: sig.Signature}},
		{"another key", other.Public().Identity, "result", body, sig},
		{"a malformed key", "not-a-key", "result", body, sig},
		{"a padded key", id + "=", "result", body, sig},
		{"a truncated signature", id, "result", body, RequestSignature{CallerID: sig.CallerID, IssuedAt: sig.IssuedAt, Signature: sig.Signature[:80]}},
		{"a signature that is not base64url", id, "result", body, RequestSignature{CallerID: sig.CallerID, IssuedAt: sig.IssuedAt, Signature: "!" + sig.Signature[1:]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyRequest(tt.identity, tt.endpoint, tt.body, tt.sig, testNow)
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
}

func TestSiteAndDaemonSignaturesDoNotCross(t *testing.T) {
	k := newTestKeys(t)
	body := []byte(`{}`)
	daemon := SignRequest(k, "pending", "site_demo", testNow, body)
	if err := VerifySiteRequest(k.Public().Identity, "pending", body, daemon, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a daemon-plane signature verified on the site plane: %v", err)
	}
	site := SignSiteRequest(k, "pending", "site_demo", testNow, body)
	if err := VerifyRequest(k.Public().Identity, "pending", body, site, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a site-plane signature verified on the daemon plane: %v", err)
	}
	if err := VerifyRequest(k.Public().Identity, "site/pending", body, site, testNow); err != nil {
		t.Fatalf("the site prefix is exactly \"site/\": %v", err)
	}
}

func TestFreshnessIsCheckedBeforeTheSignature(t *testing.T) {
	k := newTestKeys(t)
	body := []byte(`{}`)
	sig := SignRequest(k, "claim", "runner_1", testNow, body)
	forged := sig
	forged.Signature = "AAAA"

	for _, now := range []int64{testNow + MaxClockSkewMs + 1, testNow - MaxClockSkewMs - 1} {
		for _, s := range []RequestSignature{sig, forged} {
			err := VerifyRequest(k.Public().Identity, "claim", body, s, now)
			var stale *StaleError
			if !errors.As(err, &stale) || !errors.Is(err, ErrStale) {
				t.Fatalf("now=%d: got %v, want a *StaleError", now, err)
			}
			if errors.Is(err, ErrBadSignature) {
				t.Fatalf("a stale request must not also read as a bad signature")
			}
			if stale.ServerTime != now || stale.MaxSkewMs != MaxClockSkewMs || stale.IssuedAt != testNow {
				t.Fatalf("stale details: %+v", stale)
			}
		}
	}
	// At the edge of the window the forged signature is judged as a signature.
	if err := VerifyRequest(k.Public().Identity, "claim", body, forged, testNow+MaxClockSkewMs); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("inside the window a forged signature is a bad signature, got %v", err)
	}
}

func TestParseSignatureReadsIssuedAtLikeJSNumber(t *testing.T) {
	tests := []struct {
		issuedAt string
		want     int64 // 0: refused as unsigned
	}{
		{"1800000000000", 1800000000000},
		{" 1800000000000\t", 1800000000000},
		{"+1800000000000", 1800000000000},
		{"1.8e12", 1800000000000},
		{"1.8E+12", 1800000000000},
		{"1800000000000.0", 1800000000000},
		{"1800000000000.", 1800000000000},
		{"0x1A3185C5000", 0x1A3185C5000},
		{"0o32061412140000", 0o32061412140000},
		{"0b101", 5},
		{"9007199254740991", 9007199254740991},
		{"00017", 17},
		{"9007199254740992", 0},
		{"1800000000000.5", 0},
		{"0", 0},
		{"-0", 0},
		{"-1800000000000", 0},
		{"", 0},
		{"   ", 0},
		{"abc", 0},
		{"1_800", 0},
		{"0x", 0},
		{"-0x10", 0},
		{"+0x10", 0},
		{"1e", 0},
		{".", 0},
		{"Infinity", 0},
		{"infinity", 0},
		{"NaN", 0},
		{"1e400", 0},
		{"1800000000000, 1800000000001", 0},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.issuedAt), func(t *testing.T) {
			sig, err := ParseSignature("runner_1", tt.issuedAt, "sig")
			if tt.want == 0 {
				if !errors.Is(err, ErrUnsigned) {
					t.Fatalf("got %+v, %v; want ErrUnsigned", sig, err)
				}
				return
			}
			if err != nil || sig.IssuedAt != tt.want {
				t.Fatalf("got %d, %v; want %d", sig.IssuedAt, err, tt.want)
			}
		})
	}
}

func TestParseSignatureRefusesMissingHeaders(t *testing.T) {
	for _, tt := range []struct{ caller, at, sig string }{
		{"", "1800000000000", "sig"},
		{"runner_1", "", "sig"},
		{"runner_1", "1800000000000", ""},
	} {
		if _, err := ParseSignature(tt.caller, tt.at, tt.sig); !errors.Is(err, ErrUnsigned) {
			t.Errorf("%+v: got %v, want ErrUnsigned", tt, err)
		}
	}
}

func TestSignatureFromHeadersReadsOnlyThePlanesCaller(t *testing.T) {
	k := newTestKeys(t)
	sig := SignRequest(k, "claim", "runner_1", testNow, nil)
	h := http.Header{}
	sig.SetHeaders(h, HeaderRunner)

	got, err := SignatureFromHeaders(h, HeaderRunner)
	if err != nil || got != sig {
		t.Fatalf("daemon plane: got %+v, %v", got, err)
	}
	if _, err := SignatureFromHeaders(h, HeaderSite); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("the site plane read the runner header: %v", err)
	}

	// A repeated header reads as the Fetch API joins it, and so fails.
	h.Add(HeaderIssuedAt, strconv.FormatInt(testNow, 10))
	if _, err := SignatureFromHeaders(h, HeaderRunner); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("a repeated issued-at header was accepted: %v", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestVerifySiteRequestAnyKey(t *testing.T) {
	current, retiring, stranger := newTestKeys(t), newTestKeys(t), newTestKeys(t)
	body := []byte(`{"siteId":"site_demo"}`)
	keys := []string{current.Public().Identity, retiring.Public().Identity}

	byRetiring := SignSiteRequest(retiring, "enqueue", "site_demo", testNow, body)
	if err := VerifySiteRequestAnyKey(keys, "enqueue", body, byRetiring, testNow); err != nil {
		t.Fatalf("the retiring key: %v", err)
	}
	byStranger := SignSiteRequest(stranger, "enqueue", "site_demo", testNow, body)
	if err := VerifySiteRequestAnyKey(keys, "enqueue", body, byStranger, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a stranger: %v", err)
	}
	if err := VerifySiteRequestAnyKey(keys, "enqueue", body, byRetiring, testNow+MaxClockSkewMs+1); !errors.Is(err, ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	if err := VerifySiteRequestAnyKey(nil, "enqueue", body, byRetiring, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("no keys: %v", err)
	}
}
