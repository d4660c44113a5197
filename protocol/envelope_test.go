package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/nacl/box"
)

// envelopeParties is a site and a device with fresh keys.
type envelopeParties struct {
	site, device *Keys
}

func newParties(t testing.TB) envelopeParties {
	t.Helper()
	return envelopeParties{site: newTestKeys(t), device: newTestKeys(t)}
}

func (p envelopeParties) payloadContext() EnvelopeContext {
	return EnvelopeContext{
		JobID:          "job_1",
		SenderKeyID:    p.site.KeyID(),
		RecipientKeyID: p.device.KeyID(),
		DeadlineAt:     testNow + EnvelopeMaxAgeMs,
		Direction:      DirectionPayload,
	}
}

func (p envelopeParties) payloadExpected() ExpectedEnvelope {
	return ExpectedEnvelope{JobID: "job_1", SenderKeyID: p.site.KeyID(), RecipientKeyID: p.device.KeyID(), Direction: DirectionPayload}
}

func (p envelopeParties) seal(t testing.TB, plaintext string) SealedEnvelope {
	t.Helper()
	env, err := Seal(plaintext, p.site, p.device.Public().Encryption, p.payloadContext())
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return env
}

// sealInner seals arbitrary inner bytes to the device, as a relay that holds
// the device's public key could.
func (p envelopeParties) sealInner(t testing.TB, inner []byte) SealedEnvelope {
	t.Helper()
	sealed, err := box.SealAnonymous(nil, inner, p.device.encryptionPublic(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx := p.payloadContext()
	return SealedEnvelope{Ciphertext: B64(sealed), RecipientKeyID: ctx.RecipientKeyID, SenderKeyID: ctx.SenderKeyID, Direction: ctx.Direction, DeadlineAt: ctx.DeadlineAt}
}

// signedInner is an inner wrapper around body, signed by the site.
func (p envelopeParties) signedInner(body string) []byte {
	return []byte(fmt.Sprintf(`{"body":%q,"signature":%q}`, B64([]byte(body)), p.site.Sign([]byte(body))))
}

func TestSealThenOpenRoundTripsBothLegs(t *testing.T) {
	p := newParties(t)
	plaintext := `{"messages":[{"role":"user","content":"<b>&\u2028 \"quoted\" é 😀"}]}`
	env := p.seal(t, plaintext)
	got, err := Open(env, p.device, p.site.Public().Identity, p.payloadExpected())
	if err != nil || got != plaintext {
		t.Fatalf("payload: got %q, %v", got, err)
	}

	result, err := Seal(`{"outcome":{"outcome":"ok","text":"hi"}}`, p.device, p.site.Public().Encryption, EnvelopeContext{
		JobID: "job_1", SenderKeyID: p.device.KeyID(), RecipientKeyID: p.site.KeyID(), DeadlineAt: testNow, Direction: DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = Open(result, p.site, p.device.Public().Identity, ExpectedEnvelope{
		JobID: "job_1", SenderKeyID: p.device.KeyID(), RecipientKeyID: p.site.KeyID(), Direction: DirectionResult,
	})
	if err != nil || got != `{"outcome":{"outcome":"ok","text":"hi"}}` {
		t.Fatalf("result: got %q, %v", got, err)
	}
}

func TestSealUsesAFreshEphemeralKeyAndHidesThePlaintext(t *testing.T) {
	p := newParties(t)
	a, b := p.seal(t, "secret prompt"), p.seal(t, "secret prompt")
	if a.Ciphertext == b.Ciphertext {
		t.Fatal("two seals of one plaintext produced one ciphertext")
	}
	raw, _ := UnB64(a.Ciphertext)
	if bytes.Contains(raw, []byte("secret prompt")) || strings.Contains(a.Ciphertext, "secret") {
		t.Fatal("plaintext visible in the ciphertext")
	}
}

func TestSealRefusesAnUnknownDirectionOrBadRecipient(t *testing.T) {
	p := newParties(t)
	ctx := p.payloadContext()
	ctx.Direction = "sideways"
	if _, err := Seal("x", p.site, p.device.Public().Encryption, ctx); err == nil {
		t.Error("sealed with direction \"sideways\"")
	}
	if _, err := Seal("x", p.site, "short", p.payloadContext()); err == nil {
		t.Error("sealed to a malformed encryption key")
	}
}

func TestOpenRefusals(t *testing.T) {
	p := newParties(t)
	stranger := newTestKeys(t)
	good := p.seal(t, "hello")
	siteID := p.site.Public().Identity

	tampered := good
	raw, _ := UnB64(good.Ciphertext)
	raw[len(raw)-1] ^= 1
	tampered.Ciphertext = B64(raw)

	otherJob, err := Seal("hello", p.site, p.device.Public().Encryption, EnvelopeContext{
		JobID: "job_2", SenderKeyID: p.site.KeyID(), RecipientKeyID: p.device.KeyID(), DeadlineAt: good.DeadlineAt, Direction: DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A stranger (or a relay) signs with its own key and claims the site's
	// key id: the box opens, the pinned key refuses it.
	forged, err := Seal("run this", stranger, p.device.Public().Encryption, p.payloadContext())
	if err != nil {
		t.Fatal(err)
	}
	// Signed for the result leg, presented as a payload.
	wrongLeg, err := Seal("hello", p.site, p.device.Public().Encryption, EnvelopeContext{
		JobID: "job_1", SenderKeyID: p.site.KeyID(), RecipientKeyID: p.device.KeyID(), DeadlineAt: good.DeadlineAt, Direction: DirectionResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	wrongLeg.Direction = DirectionPayload
	// Signed for another recipient key id, relabelled on the outside.
	wrongRecipient, err := Seal("hello", p.site, p.device.Public().Encryption, EnvelopeContext{
		JobID: "job_1", SenderKeyID: p.site.KeyID(), RecipientKeyID: stranger.KeyID(), DeadlineAt: good.DeadlineAt, Direction: DirectionPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	wrongRecipient.RecipientKeyID = p.device.KeyID()

	ctx := p.payloadContext()
	bodyWith := func(deadline, plaintext string) string {
		return fmt.Sprintf(`{"v":"byollm/v1/envelope","jobId":"job_1","senderKeyId":%q,"recipientKeyId":%q,"deadlineAt":%s,"direction":"payload","plaintext":%s}`,
			ctx.SenderKeyID, ctx.RecipientKeyID, deadline, plaintext)
	}
	deadline := fmt.Sprint(ctx.DeadlineAt)

	tests := []struct {
		name   string
		env    SealedEnvelope
		keys   *Keys
		sender string
		want   EnvelopeFailure
	}{
		{"an outer recipient that is not us", withRecipient(good, stranger.KeyID()), p.device, siteID, EnvelopeNotForUs},
		{"an outer sender that is not the expected one", withSender(good, stranger.KeyID()), p.device, siteID, EnvelopeNotForUs},
		{"the other direction outside", withDirection(good, DirectionResult), p.device, siteID, EnvelopeNotForUs},
		{"somebody else's keys", good, stranger, siteID, EnvelopeUnopenable},
		{"a flipped ciphertext bit", tampered, p.device, siteID, EnvelopeUnopenable},
		{"a truncated ciphertext", withCiphertext(good, good.Ciphertext[:40]), p.device, siteID, EnvelopeUnopenable},
		{"a ciphertext that is not base64url", withCiphertext(good, "!!!!"), p.device, siteID, EnvelopeUnopenable},
		{"a signature by a key that is not the pinned one", forged, p.device, siteID, EnvelopeBadSignature},
		{"the right envelope checked against the wrong pin", good, p.device, stranger.Public().Identity, EnvelopeBadSignature},
		{"a pinned key that is not a key", good, p.device, "nope", EnvelopeBadSignature},
		{"a signature for another job", otherJob, p.device, siteID, EnvelopeContextMismatch},
		{"a signature for the other leg", wrongLeg, p.device, siteID, EnvelopeContextMismatch},
		{"a signature for another recipient", wrongRecipient, p.device, siteID, EnvelopeContextMismatch},
		{"a changed deadline", withDeadline(good, good.DeadlineAt-1), p.device, siteID, EnvelopeContextMismatch},
		{"an inner that is not JSON", p.sealInner(t, []byte("hello")), p.device, siteID, EnvelopeMalformed},
		{"an inner that is null", p.sealInner(t, []byte("null")), p.device, siteID, EnvelopeMalformed},
		{"an inner with no signature", p.sealInner(t, []byte(`{"body":"e30"}`)), p.device, siteID, EnvelopeMalformed},
		{"an inner whose body is a number", p.sealInner(t, []byte(`{"body":5,"signature":"x"}`)), p.device, siteID, EnvelopeMalformed},
		{"an inner with differently cased keys", p.sealInner(t, []byte(`{"Body":"e30","Signature":"x"}`)), p.device, siteID, EnvelopeMalformed},
		{"a body that is not base64url", p.sealInner(t, []byte(`{"body":"e3$0","signature":"x"}`)), p.device, siteID, EnvelopeMalformed},
		{"a body with a newline in its base64url", p.sealInner(t, []byte(`{"body":"e3\n0","signature":"x"}`)), p.device, siteID, EnvelopeMalformed},
		{"signed claims that are not JSON", p.sealInner(t, p.signedInner("not json")), p.device, siteID, EnvelopeMalformed},
		{"signed claims that are an array", p.sealInner(t, p.signedInner(`["job_1"]`)), p.device, siteID, EnvelopeContextMismatch},
		{"signed claims with a numeric job id", p.sealInner(t, p.signedInner(strings.Replace(bodyWith(deadline, `"x"`), `"job_1"`, `1`, 1))), p.device, siteID, EnvelopeContextMismatch},
		{"signed claims with a string deadline", p.sealInner(t, p.signedInner(bodyWith(`"`+deadline+`"`, `"x"`))), p.device, siteID, EnvelopeContextMismatch},
		{"signed claims with no plaintext", p.sealInner(t, p.signedInner(strings.Replace(bodyWith(deadline, `"x"`), `,"plaintext":"x"`, ``, 1))), p.device, siteID, EnvelopeMalformed},
		{"signed claims whose plaintext is an object", p.sealInner(t, p.signedInner(bodyWith(deadline, `{"messages":[]}`))), p.device, siteID, EnvelopeMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Open(tt.env, tt.keys, tt.sender, p.payloadExpected())
			if !errors.Is(err, tt.want) || got != "" {
				t.Fatalf("got %q, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestOpenReadsSignedClaimsAsJSONParseWould(t *testing.T) {
	p := newParties(t)
	ctx := p.payloadContext()
	body := func(deadline string) string {
		return fmt.Sprintf(`{"v":"anything","jobId":"job_1","senderKeyId":%q,"recipientKeyId":%q,"deadlineAt":%s,"direction":"payload","plaintext":"hi"}`,
			ctx.SenderKeyID, ctx.RecipientKeyID, deadline)
	}
	for name, b := range map[string]string{
		"a deadline written with an exponent":   body("1.8000864e12"),
		"a deadline written with a fraction":    body(fmt.Sprint(ctx.DeadlineAt) + ".0"),
		"a body led by a byte order mark":       "\ufeff" + body(fmt.Sprint(ctx.DeadlineAt)),
		"whitespace between members":            strings.ReplaceAll(body(fmt.Sprint(ctx.DeadlineAt)), ",", " ,\n"),
		"a duplicated job id, the last winning": strings.Replace(body(fmt.Sprint(ctx.DeadlineAt)), `"jobId":"job_1"`, `"jobId":"job_9","jobId":"job_1"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Open(p.sealInner(t, p.signedInner(b)), p.device, p.site.Public().Identity, p.payloadExpected())
			if err != nil || got != "hi" {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

func withRecipient(e SealedEnvelope, id string) SealedEnvelope { e.RecipientKeyID = id; return e }
func withSender(e SealedEnvelope, id string) SealedEnvelope    { e.SenderKeyID = id; return e }
func withDirection(e SealedEnvelope, d string) SealedEnvelope  { e.Direction = d; return e }
func withCiphertext(e SealedEnvelope, c string) SealedEnvelope { e.Ciphertext = c; return e }

func TestEnvelopeBytesIsTheLengthOfItsJSON(t *testing.T) {
	p := newParties(t)
	env := p.seal(t, "hello")
	encoded, err := MarshalJS(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := EnvelopeBytes(env); got != int64(len(encoded)) {
		t.Fatalf("EnvelopeBytes %d, JSON length %d", got, len(encoded))
	}
	// UTF-16 units, escapes included: é is one unit, 😀 two, \n two, \u0001 six.
	odd := SealedEnvelope{Ciphertext: "é😀\n\x01\"", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 12}
	want := int64(len(`{"ciphertext":"`) + 1 + 2 + 2 + 6 + 2 + len(`","recipientKeyId":"r","senderKeyId":"s","direction":"payload","deadlineAt":12}`))
	if got := EnvelopeBytes(odd); got != want {
		t.Fatalf("EnvelopeBytes %d, want %d", got, want)
	}
}

func TestCheckEnvelopeSizeAtTheLimit(t *testing.T) {
	base := SealedEnvelope{RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1}
	overhead := EnvelopeBytes(base)
	atLimit := base
	atLimit.Ciphertext = strings.Repeat("A", int(MaxEnvelopeBytes-overhead))
	if EnvelopeBytes(atLimit) != MaxEnvelopeBytes {
		t.Fatalf("setup: %d", EnvelopeBytes(atLimit))
	}
	if err := CheckEnvelopeSize(atLimit); err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
	over := atLimit
	over.Ciphertext += "A"
	err := CheckEnvelopeSize(over)
	var tooLarge *EnvelopeTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Bytes != MaxEnvelopeBytes+1 || tooLarge.Limit != MaxEnvelopeBytes {
		t.Fatalf("one byte over: %v", err)
	}
	want := "this message is 6.1 MB and the limit is 6.0 MB — it is a limit on one message rather than on how many you send. " +
		"Split the work into smaller jobs and send them separately. Every plan has the same ceiling."
	if got := tooLarge.RelayMessage(); got != want {
		t.Fatalf("message:\n got %q\nwant %q", got, want)
	}
}

func TestDescribeBytesRoundsUp(t *testing.T) {
	for bytes, want := range map[int64]string{
		0:                      "0.0 MB",
		1:                      "0.1 MB",
		6 * 1024 * 1024:        "6.0 MB",
		6*1024*1024 + 1:        "6.1 MB",
		10*1024*1024 + 1:       "10.1 MB",
		1024 * 1024 * 105 / 10: "10.5 MB",
	} {
		if got := describeBytes(bytes); got != want {
			t.Errorf("describeBytes(%d) = %q, want %q", bytes, got, want)
		}
	}
}

func TestKeysNeverPrintOrSerialiseTheirSecrets(t *testing.T) {
	k := newTestKeys(t)
	stored := k.Stored(1)
	secrets := []string{stored.IdentityPrivate, stored.EncryptionPrivate, fmt.Sprintf("%x", k.identity.Seed()), fmt.Sprintf("%x", k.encryption[:])}
	printed := fmt.Sprintf("%v %+v %#v %s %x %q %v %+v", k, k, k, k, k, k, *k, []*Keys{k})
	for _, s := range secrets {
		if strings.Contains(printed, s) {
			t.Fatalf("printing keys leaked a secret: %s", printed)
		}
	}
	if !strings.Contains(printed, k.KeyID()) {
		t.Fatalf("printed keys do not name the key id: %s", printed)
	}
	if _, err := json.Marshal(k); err == nil {
		t.Fatal("json.Marshal(*Keys) succeeded")
	}
	if _, err := json.Marshal(struct{ K Keys }{*k}); err == nil {
		t.Fatal("json.Marshal of a struct holding Keys succeeded")
	}
	if _, err := MarshalJS(k); err == nil {
		t.Fatal("MarshalJS(*Keys) succeeded")
	}
}
