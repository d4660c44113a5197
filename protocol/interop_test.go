package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/byorelay/byorelay/localtest"
)

// The interop test runs testdata/interop/interop.mjs once, against the real
// @byollm/protocol 0.1.1 in <repo root>/localtest/js/node_modules: JS
// verifies what Go signed and sealed, and Go verifies what JS signed and
// sealed, with keys generated fresh on both sides.

type interopRequest struct {
	Endpoint  string `json:"endpoint"`
	Body      string `json:"body"`
	CallerID  string `json:"callerId"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

type interopInput struct {
	Now    int64 `json:"now"`
	GoKeys struct {
		Site         StoredKeys `json:"site"`
		Device       StoredKeys `json:"device"`
		ControlPlane StoredKeys `json:"controlPlane"`
	} `json:"goKeys"`
	GoRequests struct {
		Daemon interopRequest `json:"daemon"`
		Site   interopRequest `json:"site"`
	} `json:"goRequests"`
	GoEnvelope struct {
		Envelope SealedEnvelope  `json:"envelope"`
		Expected json.RawMessage `json:"expected"`
	} `json:"goEnvelope"`
	GoGrant        SignedGrant      `json:"goGrant"`
	GoSuccession   interopLink      `json:"goSuccession"`
	SizeProbes     []SealedEnvelope `json:"sizeProbes"`
	TooLargeProbes []int64          `json:"tooLargeProbes"`
	IssuedAtProbes []string         `json:"issuedAtProbes"`
	JSPlaintext    string           `json:"jsPlaintext"`
}

type interopLink struct {
	Link    Succession `json:"link"`
	ToKeyID string     `json:"toKeyId"`
}

type interopOpen struct {
	OK        bool   `json:"ok"`
	Plaintext string `json:"plaintext"`
	Reason    string `json:"reason"`
}

type interopOutput struct {
	Checks struct {
		KeyIDs struct {
			Site, Device, ControlPlane string
		} `json:"keyIds"`
		StoredKeysParse          bool        `json:"storedKeysParse"`
		IdentitiesVerify         bool        `json:"identitiesVerify"`
		DaemonRequest            *string     `json:"daemonRequest"`
		DaemonRequestStale       *string     `json:"daemonRequestStale"`
		SiteRequest              *string     `json:"siteRequest"`
		SiteRequestOnDaemonPlane *string     `json:"siteRequestOnDaemonPlane"`
		EnvelopeSchema           bool        `json:"envelopeSchema"`
		EnvelopeOpen             interopOpen `json:"envelopeOpen"`
		EnvelopeOpenOtherJob     interopOpen `json:"envelopeOpenOtherJob"`
		GrantSchema              bool        `json:"grantSchema"`
		Grant                    *string     `json:"grant"`
		GrantStatement           string      `json:"grantStatement"`
		GrantTampered            *string     `json:"grantTampered"`
		SuccessionLink           bool        `json:"successionLink"`
		EnvelopeBytes            []int64     `json:"envelopeBytes"`
		TooLargeMessages         []string    `json:"tooLargeMessages"`
		IssuedAtHeaders          []int64     `json:"issuedAtHeaders"`
	} `json:"checks"`
	JSKeys struct {
		Site         StoredKeys `json:"site"`
		Device       StoredKeys `json:"device"`
		ControlPlane StoredKeys `json:"controlPlane"`
	} `json:"jsKeys"`
	JSKeyIDs struct {
		Site, Device string
	} `json:"jsKeyIds"`
	JSRequests struct {
		Daemon jsSignedRequest `json:"daemon"`
		Site   jsSignedRequest `json:"site"`
	} `json:"jsRequests"`
	JSPayload struct {
		Plaintext string         `json:"plaintext"`
		Envelope  SealedEnvelope `json:"envelope"`
	} `json:"jsPayload"`
	JSResult struct {
		Plaintext string         `json:"plaintext"`
		Envelope  SealedEnvelope `json:"envelope"`
	} `json:"jsResult"`
	JSGrant      SignedGrant `json:"jsGrant"`
	JSSuccession interopLink `json:"jsSuccession"`
}

type jsSignedRequest struct {
	Endpoint  string `json:"endpoint"`
	Body      string `json:"body"`
	RunnerID  string `json:"runnerId"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

func TestInteropWithTheJavaScriptReference(t *testing.T) {
	node, modules := localtest.RequireNode(t, "@byollm/protocol")
	now := int64(testNow)

	site, device, cp := newTestKeys(t), newTestKeys(t), newTestKeys(t)
	var in interopInput
	in.Now = now
	in.GoKeys.Site, in.GoKeys.Device, in.GoKeys.ControlPlane = site.Stored(now), device.Stored(now), cp.Stored(now)

	daemonBody := `{"protocolVersion":"2","runnerId":"runner_go","capabilities":[],"max":4}`
	ds := SignRequest(device, "claim", "runner_go", now, []byte(daemonBody))
	in.GoRequests.Daemon = interopRequest{"claim", daemonBody, ds.CallerID, ds.IssuedAt, ds.Signature}
	siteBody := `{"protocolVersion":"2","siteId":"site_go","jobId":"job_1"}`
	ss := SignSiteRequest(site, "cancel", "site_go", now, []byte(siteBody))
	in.GoRequests.Site = interopRequest{"cancel", siteBody, ss.CallerID, ss.IssuedAt, ss.Signature}

	plaintext := `{"messages":[{"role":"user","content":"<b>Bonjour</b> & \u2028\u2029 \"é\" 😀 \\ \u0001"}]}`
	env, err := Seal(plaintext, site, device.Public().Encryption, EnvelopeContext{
		JobID: "job_go", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), DeadlineAt: now + EnvelopeMaxAgeMs, Direction: DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	in.GoEnvelope.Envelope = env
	in.GoEnvelope.Expected, _ = json.Marshal(map[string]string{
		"jobId": "job_go", "senderKeyId": site.KeyID(), "recipientKeyId": device.KeyID(), "direction": DirectionPayload,
	})

	in.GoGrant, err = SignGrant(cp, SignedGrant{
		GrantID: "grant_go", JobID: "job_go", Site: site.KeyID(), User: "al\u2028ice <&> \"q\"", Owner: "bob\\",
		Purpose: "déf\nault", Kind: "llm.chat", Service: "svc 😀\u2029", IssuedAt: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	link, err := SignSuccession(site, device.Public())
	if err != nil {
		t.Fatal(err)
	}
	in.GoSuccession = interopLink{Link: link, ToKeyID: device.KeyID()}

	in.SizeProbes = []SealedEnvelope{
		env,
		{Ciphertext: "é😀\n\x01\"\\\u2028<>&", RecipientKeyID: "r", SenderKeyID: "s", Direction: "result", DeadlineAt: 9007199254740991},
	}
	in.TooLargeProbes = []int64{0, 1, MaxEnvelopeBytes, MaxEnvelopeBytes + 1, 10*1024*1024 + 1, 1024 * 1024 * 105 / 10, 123456789}
	in.IssuedAtProbes = []string{
		"1800000000000", " 1800000000000\t", "+1800000000000", "1.8e12", "1800000000000.", "0x1A3185C5000", "0o17", "0B11",
		"00017", "9007199254740991", "9007199254740992", "1800000000000.5", "0", "-0", "-5", "", " ", "abc", "1_800",
		"0x", "-0x10", "+0x10", "1e", ".", ".5e1", "Infinity", "NaN", "1e400", "1, 2", "\u00a012\u2028", "0x1p3",
	}
	in.JSPlaintext = `{"messages":[{"role":"user","content":"\u2028 <i>ça</i> & \"x\" 😀"}]}`

	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "interop", "interop.mjs"), modules)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var out interopOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node output: %v\n%s", err, stdout.String())
	}
	c := out.Checks

	t.Run("JS derives the same key ids and reads Go's key files", func(t *testing.T) {
		equal(t, "site", c.KeyIDs.Site, site.KeyID())
		equal(t, "device", c.KeyIDs.Device, device.KeyID())
		equal(t, "control plane", c.KeyIDs.ControlPlane, cp.KeyID())
		equal(t, "StoredKeys schema", c.StoredKeysParse, true)
		equal(t, "verifyPublicIdentity", c.IdentitiesVerify, true)
	})
	t.Run("a Go-signed request verifies in JS", func(t *testing.T) {
		equal(t, "daemon", refusal(c.DaemonRequest), "")
		equal(t, "daemon, stale", refusal(c.DaemonRequestStale), "stale")
		equal(t, "site", refusal(c.SiteRequest), "")
		equal(t, "site signature on the daemon plane", refusal(c.SiteRequestOnDaemonPlane), "bad-signature")
	})
	t.Run("a Go-sealed envelope opens and verifies in JS", func(t *testing.T) {
		equal(t, "schema", c.EnvelopeSchema, true)
		equal(t, "open", c.EnvelopeOpen, interopOpen{OK: true, Plaintext: plaintext})
		equal(t, "open for another job", c.EnvelopeOpenOtherJob, interopOpen{Reason: "context-mismatch"})
	})
	t.Run("a Go-signed grant verifies in JS", func(t *testing.T) {
		equal(t, "schema", c.GrantSchema, true)
		equal(t, "verifyGrant", refusal(c.Grant), "")
		statement, _ := GrantStatement(in.GoGrant)
		equal(t, "statement bytes", c.GrantStatement, string(statement))
		equal(t, "tampered", refusal(c.GrantTampered), "bad-signature")
	})
	t.Run("a Go-signed succession link verifies in JS", func(t *testing.T) {
		equal(t, "verifyLink", c.SuccessionLink, true)
	})
	t.Run("envelope size and the too-large message match the reference", func(t *testing.T) {
		for i, probe := range in.SizeProbes {
			equal(t, "envelopeBytes", EnvelopeBytes(probe), c.EnvelopeBytes[i])
		}
		for i, n := range in.TooLargeProbes {
			equal(t, "tooLargeMessage", TooLargeMessage(n, MaxEnvelopeBytes), c.TooLargeMessages[i])
		}
	})
	t.Run("issued-at headers parse as the reference relay parses them", func(t *testing.T) {
		for i, header := range in.IssuedAtProbes {
			sig, err := ParseSignature("r", header, "s")
			var got int64
			if err == nil {
				got = sig.IssuedAt
			}
			if got != c.IssuedAtHeaders[i] {
				t.Errorf("issued-at %q: Go %d (%v), JS %d", header, got, err, c.IssuedAtHeaders[i])
			}
		}
	})

	jsSite, err := out.JSKeys.Site.Keys()
	if err != nil {
		t.Fatalf("JS site key file: %v", err)
	}
	jsDevice, err := out.JSKeys.Device.Keys()
	if err != nil {
		t.Fatalf("JS device key file: %v", err)
	}
	jsCp, err := out.JSKeys.ControlPlane.Keys()
	if err != nil {
		t.Fatalf("JS control-plane key file: %v", err)
	}
	t.Run("JS key files load in Go with the same key ids", func(t *testing.T) {
		equal(t, "site", jsSite.KeyID(), out.JSKeyIDs.Site)
		equal(t, "device", jsDevice.KeyID(), out.JSKeyIDs.Device)
	})
	t.Run("a JS-signed request verifies in Go", func(t *testing.T) {
		d := out.JSRequests.Daemon
		h := RequestSignature{CallerID: d.RunnerID, IssuedAt: d.IssuedAt, Signature: d.Signature}
		if err := VerifyRequest(jsDevice.Public().Identity, d.Endpoint, []byte(d.Body), h, now); err != nil {
			t.Errorf("daemon: %v", err)
		}
		if err := VerifyRequest(jsDevice.Public().Identity, d.Endpoint, []byte(d.Body+" "), h, now); !errors.Is(err, ErrBadSignature) {
			t.Errorf("daemon, changed body: %v", err)
		}
		s := out.JSRequests.Site
		hs := RequestSignature{CallerID: s.RunnerID, IssuedAt: s.IssuedAt, Signature: s.Signature}
		if err := VerifySiteRequest(jsSite.Public().Identity, s.Endpoint, []byte(s.Body), hs, now); err != nil {
			t.Errorf("site: %v", err)
		}
	})
	t.Run("a JS-sealed envelope opens and verifies in Go", func(t *testing.T) {
		got, err := Open(out.JSPayload.Envelope, device, jsSite.Public().Identity, ExpectedEnvelope{
			JobID: "job_js", SenderKeyID: jsSite.KeyID(), RecipientKeyID: device.KeyID(), Direction: DirectionPayload,
		})
		if err != nil || got != in.JSPlaintext {
			t.Errorf("payload: %q, %v", got, err)
		}
		got, err = Open(out.JSResult.Envelope, site, jsDevice.Public().Identity, ExpectedEnvelope{
			JobID: "job_js", SenderKeyID: jsDevice.KeyID(), RecipientKeyID: site.KeyID(), Direction: DirectionResult,
		})
		if err != nil || got != out.JSResult.Plaintext {
			t.Errorf("result: %q, %v", got, err)
		}
		if _, err := Open(out.JSPayload.Envelope, device, jsDevice.Public().Identity, ExpectedEnvelope{
			JobID: "job_js", SenderKeyID: jsSite.KeyID(), RecipientKeyID: device.KeyID(), Direction: DirectionPayload,
		}); !errors.Is(err, EnvelopeBadSignature) {
			t.Errorf("payload against the wrong pin: %v", err)
		}
	})
	t.Run("a JS-signed grant and succession link verify in Go", func(t *testing.T) {
		g := out.JSGrant
		if err := VerifyGrant(g, GrantCheck{Owner: g.Owner, JobID: g.JobID, ControlPlanePublic: jsCp.Public().Identity, Now: now}); err != nil {
			t.Errorf("grant: %v", err)
		}
		if !VerifyLink(out.JSSuccession.Link, out.JSSuccession.ToKeyID) {
			t.Errorf("succession link refused")
		}
	})
}

// refusal reads a JS verifier's answer: null is success ("").
func refusal(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
