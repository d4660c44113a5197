package protocol

import (
	"errors"
	"strings"
	"testing"
)

const (
	wireIdentity = `{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}`
	wireCap      = `{"kind":"llm.chat","service":"ollama-small","backendId":"ollama","backendClass":"http","model":"llama3.2:3b","offerScope":"team"}`
	wireEnvelope = `{"ciphertext":"Y3Q","recipientKeyId":"BYOLLM-A","senderKeyId":"BYOLLM-B","direction":"result","deadlineAt":1800003600000}`
	wireStub     = `{"id":"job_1","kind":"llm.chat","owner":"alice","site":"BYOLLM-S","audience":"team","purpose":"default","sizeClass":"small","streaming":false,"deadlineAt":1800003600000}`
)

// body builds a request body from a template, replacing one placeholder so
// each refusal case differs from a valid body by exactly one thing.
func body(tmpl string, pairs ...string) string {
	return strings.NewReplacer(pairs...).Replace(tmpl)
}

// wireCase is one body and the Go type it decodes into. The type's name is
// also the @byollm/protocol schema name, which the interop test uses.
type wireCase struct {
	name string
	v    Validator
	in   string
	path string // for refusals: where the refusal must point
}

func wireAcceptCases() []wireCase {
	return []wireCase{
		{"a claim request", &ClaimRequest{}, `{"protocolVersion":"2","runnerId":"r","capabilities":[` + wireCap + `],"max":64}`, ""},
		{"a claim request with an integral float max", &ClaimRequest{}, `{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":1.0e0}`, ""},
		{"a fetch request", &FetchRequest{}, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l"}`, ""},
		{"a heartbeat request without withheld", &HeartbeatRequest{}, `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"activeLeases":[]}`, ""},
		{"a heartbeat request with a withheld kind", &HeartbeatRequest{}, `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"withheld":[{"kind":"llm.chat","claimants":[{"service":"a","offer":"team"},{"service":"b","offer":"private"}]}],"activeLeases":[{"jobId":"j","leaseId":"l"}]}`, ""},
		{"a result request", &ResultRequest{}, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":` + wireEnvelope + `,"disposition":"canceled"}`, ""},
		{"a release request", &ReleaseRequest{}, `{"protocolVersion":"2","runnerId":"r","leases":[{"jobId":"j","leaseId":"l"}],"reason":"backend-down"}`, ""},
		{"a pair start", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"0.1.1","label":"laptop","platform":"linux"},"device":` + wireIdentity + `,"capabilities":[]}`, ""},
		{"a pair poll", &PairPollRequest{}, `{"protocolVersion":"2","action":"poll","deviceCode":"0123456789abcdefghij"}`, ""},
		{"an enqueue", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + wireStub + `}`, ""},
		{"an enqueue without purpose", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"purpose":"default",`, ``) + `}`, ""},
		{"a payload", &PayloadRequest{}, `{"protocolVersion":"2","siteId":"s","jobId":"j","envelope":` + body(wireEnvelope, "result", "payload") + `}`, ""},
		{"a cancel", &CancelRequest{}, `{"protocolVersion":"2","siteId":"s","jobId":"j"}`, ""},
		{"a capability with an empty knownModels", &Capability{}, body(wireCap, `"offerScope"`, `"knownModels":[],"offerScope"`), ""},
		{"an approved poll answer with an empty owner label", &PairPollResponse{}, `{"status":"approved","runnerId":"r","owner":"o","ownerLabel":"","sites":{"k":` + wireIdentity + `}}`, ""},
		{"a pending poll answer", &PairPollResponse{}, `{"status":"pending"}`, ""},
		{"a clock-skew error", &WireError{}, `{"error":"clock-skew","message":"m","serverTime":1,"maxSkewMs":120000}`, ""},
		{"a rate-limited error with retryAfter 0", &WireError{}, `{"error":"rate-limited","message":"m","retryAfter":0}`, ""},
		{"a label of 120 astral characters (zod counts code points)", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"1","label":"` + strings.Repeat("😀", 120) + `","platform":"win32"},"device":` + wireIdentity + `,"capabilities":[]}`, ""},
		{"a claim response", &ClaimResponse{}, `{"jobs":[` + body(wireStub, `}`, `,"lease":{"id":"l","runnerId":"r","expiresAt":1800000060000},"grant":{"grantId":"g","jobId":"job_1","site":"BYOLLM-S","user":"alice","owner":"bob","purpose":"default","kind":"llm.chat","service":"ollama-small","issuedAt":1800000000000,"signature":"c2ln"}}`) + `],"leaseMs":60000}`, ""},
		{"a heartbeat response with rotations", &HeartbeatResponse{}, `{"sites":{"k":` + wireIdentity + `},"successions":{"k":{"succeeds":[{"identity":` + wireIdentity + `,"signature":"c2ln"}],"retiringUntil":1800604800000}},"updateTo":"0.1.2","awaitingConsent":["k"],"cancel":[{"jobId":"j","leaseId":"l"}],"lost":[],"serverTime":1800000000000}`, ""},
		{"a pair start response", &PairStartResponse{}, `{"deviceCode":"0123456789abcdefghijklmnop","userCode":"ABCD-EFGH","verificationUrl":"https://relay.example/pair","expiresAt":1800000600000,"pollIntervalMs":2000}`, ""},
		{"a fetch response", &FetchResponse{}, `{"envelope":` + wireEnvelope + `}`, ""},
		{"a duplicate result response", &ResultResponse{}, `{"accepted":false,"duplicate":true,"state":"done"}`, ""},
		{"a release response", &ReleaseResponse{}, `{"released":["j"]}`, ""},
		{"a version refusal", &WireError{}, `{"error":"unsupported-protocol-version","message":"m","supported":["2"],"minimum":"2"}`, ""},
		{"a floor refusal", &WireError{}, `{"error":"daemon-below-floor","message":"m","floor":"0.1.1"}`, ""},
		{"a duplicate key whose last value is valid", &ClaimRequest{}, `{"protocolVersion":"2","runnerId":"r","capabilities":[],"max":"x","max":3}`, ""},
	}
}

func TestDecodeStrictAcceptsValidBodies(t *testing.T) {
	for _, tc := range wireAcceptCases() {
		t.Run(tc.name, func(t *testing.T) {
			if err := DecodeStrict([]byte(tc.in), tc.v); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

func wireRefuseCases() []wireCase {
	claim := `{"protocolVersion":"2","runnerId":"r","capabilities":[CAP],"max":MAX}`
	claimWith := func(pairs ...string) string {
		return body(body(claim, "CAP", wireCap, "MAX", "4"), pairs...)
	}
	heartbeat := `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"withheld":WITHHELD,"activeLeases":[]}`
	return []wireCase{
		{"invalid JSON", &ClaimRequest{}, `{"protocolVersion":"2",`, ""},
		{"two JSON values", &ClaimRequest{}, claimWith() + ` {}`, ""},
		{"a body that is not an object", &ClaimRequest{}, `[]`, ""},
		{"an unknown top-level key", &ClaimRequest{}, body(claimWith(), `"max"`, `"extra":1,"max"`), "extra"},
		{"a __proto__ key", &FetchRequest{}, `{"__proto__":{},"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l"}`, "__proto__"},
		{"an unknown nested key", &ClaimRequest{}, body(claimWith(), `"offerScope"`, `"isDefault":true,"offerScope"`), "capabilities[0].isDefault"},
		{"an unknown key two levels down", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"1","label":"l","platform":"linux","arch":"x64"},"device":` + wireIdentity + `,"capabilities":[]}`, "daemon.arch"},
		{"a missing required key", &ClaimRequest{}, `{"protocolVersion":"2","runnerId":"r","capabilities":[]}`, "max"},
		{"a missing nested required key", &ClaimRequest{}, body(claimWith(), `"model":"llama3.2:3b",`, ``), "capabilities[0].model"},
		{"null for a required key", &ClaimRequest{}, body(claimWith(), `"runnerId":"r"`, `"runnerId":null`), "runnerId"},
		{"null for an optional key", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"default"`, `null`) + `}`, "stub.purpose"},
		{"a string where an int belongs", &ClaimRequest{}, claimWith("4", `"4"`), "max"},
		{"a fraction where an int belongs", &ClaimRequest{}, claimWith("4", `4.5`), "max"},
		{"an unsafe integer", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, "1800003600000", "9007199254740992") + `}`, "stub.deadlineAt"},
		{"a number where a string belongs", &FetchRequest{}, `{"protocolVersion":"2","runnerId":1,"jobId":"j","leaseId":"l"}`, "runnerId"},
		{"a string where a boolean belongs", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, "false", `"false"`) + `}`, "stub.streaming"},
		{"an object where an array belongs", &ClaimRequest{}, body(claim, "[CAP]", "{}", "MAX", "4"), "capabilities"},
		{"a wrong protocol version literal", &FetchRequest{}, `{"protocolVersion":"1","runnerId":"r","jobId":"j","leaseId":"l"}`, "protocolVersion"},
		{"an empty required string", &FetchRequest{}, `{"protocolVersion":"2","runnerId":"r","jobId":"","leaseId":"l"}`, "jobId"},
		{"an empty optional min(1) string", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"default"`, `""`) + `}`, "stub.purpose"},
		{"max below 1", &ClaimRequest{}, claimWith("4", "0"), "max"},
		{"max above 64", &ClaimRequest{}, claimWith("4", "65"), "max"},
		{"an unknown job kind", &ClaimRequest{}, body(claimWith(), "llm.chat", "llm.embed"), "capabilities[0].kind"},
		{"an unknown backend id", &ClaimRequest{}, body(claimWith(), `"ollama"`, `"ollama2"`), "capabilities[0].backendId"},
		{"an unknown backend class", &ClaimRequest{}, body(claimWith(), `"http"`, `"socket"`), "capabilities[0].backendClass"},
		{"the retired public offer scope", &ClaimRequest{}, body(claimWith(), `"team"`, `"public"`), "capabilities[0].offerScope"},
		{"an empty known model", &ClaimRequest{}, body(claimWith(), `"offerScope"`, `"knownModels":[""],"offerScope"`), "capabilities[0].knownModels[0]"},
		{"a withheld kind with one claimant", &HeartbeatRequest{}, body(heartbeat, "WITHHELD", `[{"kind":"llm.chat","claimants":[{"service":"a","offer":"team"}]}]`), "withheld[0].claimants"},
		{"withheld null", &HeartbeatRequest{}, body(heartbeat, "WITHHELD", `null`), "withheld"},
		{"a grant ref with an extra key", &HeartbeatRequest{}, body(heartbeat, "WITHHELD", `[]`, `"activeLeases":[]`, `"activeLeases":[{"jobId":"j","leaseId":"l","runnerId":"r"}]`), "activeLeases[0].runnerId"},
		{"an unknown audience", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"team"`, `"public"`) + `}`, "stub.audience"},
		{"an unknown size class", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"small"`, `"tiny"`) + `}`, "stub.sizeClass"},
		{"a zero deadline", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, "1800003600000", "0") + `}`, "stub.deadlineAt"},
		{"a negative deadline", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, "1800003600000", "-1") + `}`, "stub.deadlineAt"},
		{"a stub carrying the retired service field", &EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + body(wireStub, `"streaming"`, `"service":"x","streaming"`) + `}`, "stub.service"},
		{"an unknown envelope direction", &PayloadRequest{}, `{"protocolVersion":"2","siteId":"s","jobId":"j","envelope":` + body(wireEnvelope, "result", "both") + `}`, "envelope.direction"},
		{"an unknown disposition", &ResultRequest{}, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":` + wireEnvelope + `,"disposition":"refused"}`, "disposition"},
		{"an unknown release reason", &ReleaseRequest{}, `{"protocolVersion":"2","runnerId":"r","leases":[],"reason":"bored"}`, "reason"},
		{"a label over 120 characters", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"1","label":"` + strings.Repeat("x", 121) + `","platform":"linux"},"device":` + wireIdentity + `,"capabilities":[]}`, "daemon.label"},
		{"a label of 121 astral characters", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"1","label":"` + strings.Repeat("😀", 121) + `","platform":"linux"},"device":` + wireIdentity + `,"capabilities":[]}`, "daemon.label"},
		{"an unknown platform", &PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"1","label":"l","platform":"freebsd"},"device":` + wireIdentity + `,"capabilities":[]}`, "daemon.platform"},
		{"a start body sent as a poll", &PairPollRequest{}, `{"protocolVersion":"2","action":"start","deviceCode":"0123456789abcdefghij"}`, "action"},
		{"a device code under 20 characters", &PairPollRequest{}, `{"protocolVersion":"2","action":"poll","deviceCode":"short"}`, "deviceCode"},
		{"a pending answer carrying a runner id", &PairPollResponse{}, `{"status":"pending","runnerId":"r"}`, ""},
		{"an approved answer without sites", &PairPollResponse{}, `{"status":"approved","runnerId":"r","owner":"o"}`, "sites"},
		{"an unknown poll status", &PairPollResponse{}, `{"status":"maybe"}`, "status"},
		{"an unknown error code", &WireError{}, `{"error":"teapot","message":"m"}`, "error"},
		{"clock-skew without its fields", &WireError{}, `{"error":"clock-skew","message":"m"}`, ""},
		{"serverTime on another code", &WireError{}, `{"error":"unauthorized","message":"m","serverTime":1}`, ""},
		{"daemon-below-floor without floor", &WireError{}, `{"error":"daemon-below-floor","message":"m"}`, ""},
		{"floor on another code", &WireError{}, `{"error":"bad-request","message":"m","floor":"1.0.0"}`, ""},
		{"a version refusal without supported", &WireError{}, `{"error":"unsupported-protocol-version","message":"m"}`, ""},
		{"supported on another code", &WireError{}, `{"error":"bad-request","message":"m","supported":["2"]}`, ""},
		{"a negative retryAfter", &WireError{}, `{"error":"rate-limited","message":"m","retryAfter":-1}`, "retryAfter"},
		{"a succession chain over 64 links", &HeartbeatResponse{}, `{"sites":{},"successions":{"k":{"succeeds":[` + strings.TrimSuffix(strings.Repeat(`{"identity":`+wireIdentity+`,"signature":"s"},`, 65), ",") + `]}},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":1}`, "successions.k.succeeds"},
		{"a duplicate key whose last value is invalid", &ClaimRequest{}, claimWith("4", `3,"max":"x"`), "max"},
	}
}

func TestDecodeStrictRefuses(t *testing.T) {
	for _, tc := range wireRefuseCases() {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeStrict([]byte(tc.in), tc.v)
			if err == nil {
				t.Fatalf("accepted %s", tc.in)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			if de.Path != tc.path {
				t.Fatalf("refusal points at %q, want %q (%v)", de.Path, tc.path, err)
			}
		})
	}
}

func TestDecodeStrictFillsTheWithheldDefault(t *testing.T) {
	var r HeartbeatRequest
	in := `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"activeLeases":[]}`
	if err := DecodeStrict([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	out := mustEncode(t, r)
	want := `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[],"withheld":[],"activeLeases":[]}`
	if out != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestDecodeStrictResetsTheTarget(t *testing.T) {
	r := FetchRequest{ProtocolVersion: "2", RunnerID: "stale"}
	if err := DecodeStrict([]byte(`{"protocolVersion":"2","jobId":"j","leaseId":"l"}`), &r); err == nil {
		t.Fatal("a body missing runnerId was accepted because the target still held one")
	}
}

func TestDecodeStrictKeepsRecordOrder(t *testing.T) {
	var r HeartbeatResponse
	in := `{"sites":{"b":` + wireIdentity + `,"a":` + wireIdentity + `,"b":` + body(wireIdentity, "aWQ", "bmV3") + `},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":1}`
	if err := DecodeStrict([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Sites.Keys(), ","); got != "b,a" {
		t.Fatalf("keys %s, want b,a (duplicate keeps its first position)", got)
	}
	if id, _ := r.Sites.Get("b"); id.Identity != "bmV3" {
		t.Fatalf("duplicate key kept %q, want the last value", id.Identity)
	}
}

func TestDecodeThenEncodeGivesTheBodyBack(t *testing.T) {
	bodies := []struct {
		v  Validator
		in string
	}{
		{&ClaimRequest{}, `{"protocolVersion":"2","runnerId":"r","capabilities":[` + body(wireCap, `"offerScope"`, `"knownModels":["a","b"],"offerScope"`) + `],"max":4}`},
		{&HeartbeatRequest{}, `{"protocolVersion":"2","runnerId":"r","daemonVersion":"0.1.1","capabilities":[` + wireCap + `],"withheld":[{"kind":"llm.generate","claimants":[{"service":"a","offer":"team"},{"service":"b","offer":"private"}]}],"activeLeases":[{"jobId":"j","leaseId":"l"}]}`},
		{&ResultRequest{}, `{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":` + wireEnvelope + `,"disposition":"ok"}`},
		{&ReleaseRequest{}, `{"protocolVersion":"2","runnerId":"r","leases":[],"reason":"refused"}`},
		{&PairStartRequest{}, `{"protocolVersion":"2","action":"start","daemon":{"version":"0.1.1","label":"lab \u2028 <b>","platform":"darwin"},"device":` + wireIdentity + `,"capabilities":[]}`},
		{&EnqueueRequest{}, `{"protocolVersion":"2","siteId":"s","stub":` + wireStub + `}`},
		{&PairPollResponse{}, `{"status":"approved","runnerId":"r","owner":"o","ownerLabel":"Bob","sites":{"z":` + wireIdentity + `,"1":` + wireIdentity + `},"controlPlanePublic":"cp"}`},
	}
	for _, b := range bodies {
		if err := DecodeStrict([]byte(b.in), b.v); err != nil {
			t.Fatalf("%T refused: %v", b.v, err)
		}
		// JS writes U+2028 raw and array-index keys ("1") first.
		want := strings.ReplaceAll(b.in, `\u2028`, "\u2028")
		want = strings.Replace(want, `"z":`+wireIdentity+`,"1":`+wireIdentity, `"1":`+wireIdentity+`,"z":`+wireIdentity, 1)
		if got := mustEncode(t, b.v); got != want {
			t.Fatalf("%T round trip\n got  %s\n want %s", b.v, got, want)
		}
	}
}

func mustEncode(t *testing.T, v any) string {
	t.Helper()
	b, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
