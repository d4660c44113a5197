package protocol

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func wireTestStub() JobStub {
	return JobStub{
		ID: "job_1", Kind: "llm.chat", Owner: "alice", Site: "BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W",
		Audience: "team", Purpose: "default", SizeClass: "small", Streaming: false, DeadlineAt: 1800003600000,
	}
}

func wireTestLease() Lease {
	return Lease{ID: "6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10", RunnerID: "runner_1", ExpiresAt: 1800000060000}
}

func wireTestGrant() *SignedGrant {
	return &SignedGrant{
		GrantID: "grant_1", JobID: "job_1", Site: "BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W", User: "alice", Owner: "bob",
		Purpose: "default", Kind: "llm.chat", Service: "ollama-small", IssuedAt: 1800000000000, Signature: "c2ln",
	}
}

func TestEncodeExactBytes(t *testing.T) {
	stub := wireTestStub()
	noPurpose := stub
	noPurpose.Purpose = ""
	identity := PublicIdentity{Identity: "aWQ", Encryption: "ZW5j", EncryptionSig: "c2ln"}
	var sites Record[PublicIdentity]
	sites.Set("BYOLLM-B", identity)
	sites.Set("BYOLLM-A", identity)
	var successions Record[SiteSuccession]
	successions.Set("BYOLLM-B", SiteSuccession{Succeeds: []Succession{{Identity: identity, Signature: "c2ln"}}, RetiringUntil: 1800604800000})
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"a job stub", stub,
			`{"id":"job_1","kind":"llm.chat","owner":"alice","site":"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W","audience":"team","purpose":"default","sizeClass":"small","streaming":false,"deadlineAt":1800003600000}`},
		{"a job stub without purpose omits the key", noPurpose,
			`{"id":"job_1","kind":"llm.chat","owner":"alice","site":"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W","audience":"team","sizeClass":"small","streaming":false,"deadlineAt":1800003600000}`},
		{"a claimed stub without grant", Claimed(stub, wireTestLease(), nil),
			`{"id":"job_1","kind":"llm.chat","owner":"alice","site":"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W","audience":"team","purpose":"default","sizeClass":"small","streaming":false,"deadlineAt":1800003600000,"lease":{"id":"6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10","runnerId":"runner_1","expiresAt":1800000060000}}`},
		{"a claimed stub with grant", Claimed(stub, wireTestLease(), wireTestGrant()),
			`{"id":"job_1","kind":"llm.chat","owner":"alice","site":"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W","audience":"team","purpose":"default","sizeClass":"small","streaming":false,"deadlineAt":1800003600000,"lease":{"id":"6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10","runnerId":"runner_1","expiresAt":1800000060000},"grant":{"grantId":"grant_1","jobId":"job_1","site":"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W","user":"alice","owner":"bob","purpose":"default","kind":"llm.chat","service":"ollama-small","issuedAt":1800000000000,"signature":"c2ln"}}`},
		{"an empty claim response writes jobs as []", ClaimResponse{LeaseMs: 60000}, `{"jobs":[],"leaseMs":60000}`},
		{"a heartbeat response in the relay's key order", HeartbeatResponse{Sites: sites, ServerTime: 1800000000000},
			`{"sites":{"BYOLLM-B":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"},"BYOLLM-A":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":1800000000000}`},
		{"a heartbeat response with rotations and an update", HeartbeatResponse{
			Sites: sites[:1], Successions: successions, UpdateTo: "0.1.2", AwaitingConsent: []string{"BYOLLM-B"},
			Cancel: []GrantRef{{JobID: "j", LeaseID: "l"}}, Lost: []GrantRef{}, ServerTime: 1},
			`{"sites":{"BYOLLM-B":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}},"successions":{"BYOLLM-B":{"succeeds":[{"identity":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"},"signature":"c2ln"}],"retiringUntil":1800604800000}},"updateTo":"0.1.2","awaitingConsent":["BYOLLM-B"],"cancel":[{"jobId":"j","leaseId":"l"}],"lost":[],"serverTime":1}`},
		{"a plain error body", NewWireError(CodeBadRequest, "request failed schema validation"),
			`{"error":"bad-request","message":"request failed schema validation"}`},
		{"the clock-skew refusal", ClockSkewError(1800000000000),
			`{"error":"clock-skew","message":"this request's timestamp is too far from the server's clock; check the machine's time and try again","serverTime":1800000000000,"maxSkewMs":120000}`},
		{"the floor refusal", *CheckDaemonFloor("0.1.0", "0.1.1"),
			"{\"error\":\"daemon-below-floor\",\"message\":\"byollm 0.1.0 is below the supported floor (0.1.1). Run `npm i -g byollm@latest`, then `byollm start`.\",\"floor\":\"0.1.1\"}"},
		{"a retryable error keeps retryAfter 0", RetryableError(CodeRateLimited, "slow down", 0),
			`{"error":"rate-limited","message":"slow down","retryAfter":0}`},
		{"a bare error", BareError{Error: CodeNotFound}, `{"error":"not-found"}`},
		{"a result response without duplicate", ResultResponse{Accepted: true, State: "done"}, `{"accepted":true,"state":"done"}`},
		{"a site pending job that is not claimed", SitePendingResponse{Jobs: []SitePendingJob{{JobID: "j", AwaitingUntil: 5}}}, `{"jobs":[{"jobId":"j","awaitingUntil":5}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustEncode(t, tc.v); got != tc.want {
				t.Fatalf("\n got  %s\n want %s", got, tc.want)
			}
		})
	}
}

func TestEncodeStringsAsJSONStringify(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"line\u2028para\u2029end", "\"line\u2028para\u2029end\""},
		{"q\"b\\s/", `"q\"b\\s/"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001f` + "\x7f" + `"`},
		{"é😀", `"é😀"`},
		{"bad\xffutf8", "\"bad\uFFFDutf8\""},
	}
	for _, tc := range cases {
		if got := mustEncode(t, tc.in); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestRecordWritesArrayIndexKeysFirst(t *testing.T) {
	var r Record[int]
	for i, k := range []string{"b", "10", "a", "2", "01", "4294967295", "4294967294"} {
		r.Set(k, i)
	}
	r.Set("b", 99)
	got := mustEncode(t, r)
	want := `{"2":3,"10":1,"4294967294":6,"b":99,"a":2,"01":4,"4294967295":5}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// wireRepoRoot is the directory holding go.mod, found upward from the
// test's working directory.
func wireRepoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// wireVector returns one top-level value of the vectors file, compacted
// (the file is pretty-printed; compaction keeps key order).
func wireVector(t *testing.T, key string) []byte {
	t.Helper()
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("read the vectors: %v", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	v, ok := all[key]
	if !ok {
		t.Fatalf("vector %q missing", key)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, v); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestVectorClaimResponseRoundTripsByteForByte(t *testing.T) {
	want := wireVector(t, "claimResponse")
	var r ClaimResponse
	if err := DecodeStrict(want, &r); err != nil {
		t.Fatal(err)
	}
	if r.Jobs[0].Grant == nil || r.Jobs[0].Lease.ID != "6f1c2a9e-3b7d-4c1e-9a55-0d2f8e7b4a10" {
		t.Fatalf("decoded %+v", r.Jobs[0])
	}
	if got := mustEncode(t, r); got != string(want) {
		t.Fatalf("\n got  %s\n want %s", got, want)
	}
}

func TestVectorHeartbeatRequestParsed(t *testing.T) {
	want := wireVector(t, "heartbeatRequestParsed")
	// The generator's input had no withheld key; zod's default put [] in
	// the schema's place, which is where the struct writes it.
	input := bytes.Replace(want, []byte(`"withheld":[],`), nil, 1)
	if bytes.Equal(input, want) {
		t.Fatal("vector has no withheld to remove")
	}
	for _, in := range [][]byte{want, input} {
		var r HeartbeatRequest
		if err := DecodeStrict(in, &r); err != nil {
			t.Fatal(err)
		}
		if got := mustEncode(t, r); got != string(want) {
			t.Fatalf("\n got  %s\n want %s", got, want)
		}
	}
}

// The vector is HeartbeatResponse.parse output, which is in schema key
// order; the reference relay writes its own object literal, whose order
// differs (awaitingConsent before cancel). Same members, relay order.
func TestVectorHeartbeatResponse(t *testing.T) {
	vector := wireVector(t, "heartbeatResponse")
	var r HeartbeatResponse
	if err := DecodeStrict(vector, &r); err != nil {
		t.Fatal(err)
	}
	got := mustEncode(t, r)
	var a, b any
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(vector, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("members differ\n got  %s\n want %s", got, vector)
	}
	site, _ := r.Sites.Get("BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W")
	siteJSON := mustEncode(t, site)
	want := `{"sites":{"BYOLLM-FAZZ-E4JF-4VKV-ARQF-83MT-XW0W":` + siteJSON + `},"awaitingConsent":[],"cancel":[],"lost":[],"serverTime":1800000000000}`
	if got != want {
		t.Fatalf("\n got  %s\n want %s", got, want)
	}
}

// foreignJSON is a type encoding itself with encoding/json conventions.
type foreignJSON struct{}

func (foreignJSON) MarshalJSON() ([]byte, error) {
	return []byte(`{"z":1.50,"a":"\u2028<","1":[1e2,true,null]}`), nil
}

func TestEncodeRewritesForeignMarshalers(t *testing.T) {
	got := mustEncode(t, struct {
		F foreignJSON `json:"f"`
	}{})
	want := "{\"f\":{\"1\":[100,true,null],\"z\":1.5,\"a\":\"\u2028<\"}}"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
