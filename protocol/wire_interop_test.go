package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/byorelay/byorelay/localtest"
)

// These tests run testdata/js/encode.mjs, which parses bodies with the real
// @byollm/protocol 0.1.1 zod schemas and prints the reference's
// JSON.stringify, so Go's bytes and Go's refusals are compared with the
// reference's own.

// wireJSResult is one answer of encode.mjs.
type wireJSResult struct {
	OK      bool   `json:"ok"`
	JSON    string `json:"json"`
	Why     string `json:"why"`
	Missing bool   `json:"missing"`
}

type wireJSCase struct {
	Schema string `json:"schema,omitempty"`
	Fn     string `json:"fn,omitempty"`
	Body   string `json:"body"`
}

// runWireReference sends cases to the reference through Node. With no node
// or no node_modules it fails under CI and skips elsewhere.
func runWireReference(t *testing.T, cases []wireJSCase) []wireJSResult {
	t.Helper()
	root := wireRepoRoot(t)
	node, modules := localtest.RequireNode(t, "@byollm/protocol")
	input, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := filepath.Join(root, "protocol", "testdata", "js", "encode.mjs")
	cmd := exec.CommandContext(ctx, node, script, modules)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("encode.mjs: %v\n%s", err, stderr.String())
	}
	var results []wireJSResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("encode.mjs output: %v\n%s", err, out)
	}
	if len(results) != len(cases) {
		t.Fatalf("%d results for %d cases", len(results), len(cases))
	}
	return results
}

// schemaName is the Go type's name, which is also the zod schema's.
func schemaName(v any) string {
	return reflect.TypeOf(v).Elem().Name()
}

func TestInteropEncodingMatchesTheReference(t *testing.T) {
	stub := wireTestStub()
	withoutGrant := Claimed(stub, wireTestLease(), nil)
	withGrant := Claimed(stub, wireTestLease(), wireTestGrant())
	plain := NewWireError(CodeBadRequest, "request failed schema validation")
	skew := ClockSkewError(1800000000000)
	label := PairStartRequest{
		ProtocolVersion: "2", Action: "start",
		Daemon:       DaemonInfo{Version: "0.1.1", Label: "bob's <laptop> & \u2028 \"quoted\" \x01", Platform: "linux"},
		Device:       PublicIdentity{Identity: "aWQ", Encryption: "ZW5j", EncryptionSig: "c2ln"},
		Capabilities: []Capability{},
	}
	values := []Validator{&stub, &withoutGrant, &withGrant, &plain, &skew, CheckDaemonFloor("0.1.0", "0.1.1"), &label}
	var cases []wireJSCase
	var want []string
	for _, v := range values {
		b := mustEncode(t, v)
		cases = append(cases, wireJSCase{Schema: schemaName(v), Body: b})
		want = append(want, b)
	}
	// Bodies the reference fills in or normalises: Go decodes and
	// re-encodes them, the reference parses and stringifies them.
	for _, tc := range wireAcceptCases() {
		if err := DecodeStrict([]byte(tc.in), tc.v); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cases = append(cases, wireJSCase{Schema: schemaName(tc.v), Body: tc.in})
		want = append(want, mustEncode(t, tc.v))
	}
	results := runWireReference(t, cases)
	checked := 0
	for i, r := range results {
		if r.Missing {
			continue // a relay-only (site-plane) schema the package does not export
		}
		checked++
		if !r.OK {
			t.Errorf("%s: the reference refused %s: %s", cases[i].Schema, cases[i].Body, r.Why)
			continue
		}
		if !sameAsReference(cases[i].Schema, want[i], r.JSON) {
			t.Errorf("%s:\n go   %s\n node %s", cases[i].Schema, want[i], r.JSON)
		}
	}
	t.Logf("%d of %d bodies compared with the reference", checked, len(cases))
	if checked < len(values) {
		t.Fatalf("only %d cases checked", checked)
	}
}

func TestInteropVersionRefusalsMatchTheReference(t *testing.T) {
	bodies := []string{`{"protocolVersion":"0"}`, `{}`, `{"protocolVersion":"3"}`, `{"protocolVersion":"10"}`, `{"protocolVersion":2}`, `{"protocolVersion":"x\u2028y"}`}
	var cases []wireJSCase
	for _, b := range bodies {
		cases = append(cases, wireJSCase{Fn: "checkProtocolVersion", Body: b})
	}
	results := runWireReference(t, cases)
	for i, b := range bodies {
		if got := mustEncode(t, CheckVersion([]byte(b), nil)); got != results[i].JSON {
			t.Errorf("%s:\n go   %s\n node %s", b, got, results[i].JSON)
		}
	}
}

func TestInteropRefusalsAgreeWithTheReference(t *testing.T) {
	refusals := wireRefuseCases()
	var cases []wireJSCase
	for _, tc := range refusals {
		cases = append(cases, wireJSCase{Schema: schemaName(tc.v), Body: tc.in})
	}
	results := runWireReference(t, cases)
	checked := 0
	for i, r := range results {
		if r.Missing {
			continue
		}
		checked++
		if r.OK {
			t.Errorf("%s: Go refuses and the reference accepts %s", refusals[i].name, refusals[i].in)
		}
	}
	t.Logf("%d of %d refusals checked against the reference", checked, len(cases))
	if checked < 20 {
		t.Fatalf("only %d refusals checked against the reference", checked)
	}
}

// wireMutations derives bodies from a valid one, each changed in one place:
// a key dropped, an unknown key added, a value nulled, emptied, retyped or
// moved out of range. Which of them the reference refuses is the contract.
func wireMutations(t *testing.T, valid string) []string {
	t.Helper()
	var root any
	if err := json.Unmarshal([]byte(valid), &root); err != nil {
		t.Fatal(err)
	}
	var out []string
	emit := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	// replace rebuilds the whole body with the value at path swapped.
	var walk func(v any, set func(any) any)
	walk = func(v any, set func(any) any) {
		for _, alt := range wireAlternatives(v) {
			emit(set(alt))
		}
		switch x := v.(type) {
		case map[string]any:
			dropped := map[string]any{}
			for k, val := range x {
				dropped[k] = val
			}
			dropped["zz"] = 1
			emit(set(dropped))
			for k := range x {
				without := map[string]any{}
				for k2, val := range x {
					if k2 != k {
						without[k2] = val
					}
				}
				emit(set(without))
				walk(x[k], func(nv any) any {
					copied := map[string]any{}
					for k2, val := range x {
						copied[k2] = val
					}
					copied[k] = nv
					return set(copied)
				})
			}
		case []any:
			for i := range x {
				walk(x[i], func(nv any) any {
					copied := append([]any(nil), x...)
					copied[i] = nv
					return set(copied)
				})
			}
		}
	}
	walk(root, func(v any) any { return v })
	return out
}

func wireAlternatives(v any) []any {
	switch x := v.(type) {
	case string:
		return []any{nil, "", 5, x + "-zz", "😀"}
	case float64:
		return []any{nil, 0.0, -1.0, 1.5, 9007199254740992.0, "1", x + 1}
	case bool:
		return []any{nil, "true"}
	case []any:
		return []any{nil, map[string]any{}, []any{}}
	case map[string]any:
		return []any{nil, []any{}, "x"}
	}
	return nil
}

func TestInteropMutatedBodiesAreJudgedLikeTheReference(t *testing.T) {
	type mutant struct {
		typ  reflect.Type
		body string
	}
	var mutants []mutant
	var cases []wireJSCase
	for _, tc := range wireAcceptCases() {
		typ := reflect.TypeOf(tc.v).Elem()
		for _, body := range wireMutations(t, tc.in) {
			mutants = append(mutants, mutant{typ, body})
			cases = append(cases, wireJSCase{Schema: typ.Name(), Body: body})
		}
	}
	results := runWireReference(t, cases)
	checked, disagreements := 0, 0
	for i, r := range results {
		if r.Missing {
			continue
		}
		checked++
		v := reflect.New(mutants[i].typ).Interface().(Validator)
		err := DecodeStrict([]byte(mutants[i].body), v)
		if (err == nil) != r.OK {
			disagreements++
			if disagreements <= 20 {
				t.Errorf("%s %s: Go error %v, reference ok=%v (%s)", mutants[i].typ.Name(), mutants[i].body, err, r.OK, r.Why)
			}
			continue
		}
		if r.OK {
			if got := mustEncode(t, v); !sameAsReference(mutants[i].typ.Name(), got, r.JSON) {
				t.Errorf("%s %s:\n go   %s\n node %s", mutants[i].typ.Name(), mutants[i].body, got, r.JSON)
			}
		}
	}
	t.Logf("%d mutated bodies judged by both, %d disagreements", checked, disagreements)
	if checked < 500 {
		t.Fatalf("only %d mutated bodies reached the reference", checked)
	}
}

// sameAsReference compares Go's bytes with zod's JSON.stringify. zod
// writes a parsed object in schema key order; the reference relay writes
// HeartbeatResponse from its own object literal, in another order, and that
// is the order Go keeps. There the members are compared instead.
func sameAsReference(schema, goJSON, nodeJSON string) bool {
	if schema != "HeartbeatResponse" {
		return goJSON == nodeJSON
	}
	var a, b any
	if json.Unmarshal([]byte(goJSON), &a) != nil || json.Unmarshal([]byte(nodeJSON), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

func TestInteropVocabulariesMatchTheReference(t *testing.T) {
	results := runWireReference(t, []wireJSCase{{Fn: "vocab", Body: "null"}})
	if !results[0].OK {
		t.Fatal(results[0].Why)
	}
	var ref struct {
		JobKinds, SizeClasses, Audiences, OfferScopes, BackendClasses, BackendIDs []string
		ReleaseReasons, ResultDispositions, EnvelopeDirections, Platforms         []string
		JobStates, WireErrorCodes, SupportedProtocolVersions                      []string
		BackendClassOf                                                            map[string]string
		ErrorStatus                                                               map[string]int
		MaxEnvelopeBytes, MaxClockSkewMs, MaxSuccessionChain                      int64
		ProtocolVersion, MinProtocolVersion, UpgradeCommand, UpdateOfferSince     string
	}
	if err := json.Unmarshal([]byte(results[0].JSON), &ref); err != nil {
		t.Fatal(err)
	}
	lists := []struct {
		name     string
		got, ref []string
	}{
		{"JobKinds", JobKinds, ref.JobKinds},
		{"SizeClasses", SizeClasses, ref.SizeClasses},
		{"Audiences", Audiences, ref.Audiences},
		{"OfferScopes", OfferScopes, ref.OfferScopes},
		{"BackendClasses", BackendClasses, ref.BackendClasses},
		{"BackendIDs", BackendIDs, ref.BackendIDs},
		{"ReleaseReasons", ReleaseReasons, ref.ReleaseReasons},
		{"ResultDispositions", ResultDispositions, ref.ResultDispositions},
		{"EnvelopeDirections", EnvelopeDirections, ref.EnvelopeDirections},
		{"Platforms", Platforms, ref.Platforms},
		{"JobStates", JobStates, ref.JobStates},
		{"WireErrorCodes", WireErrorCodes, ref.WireErrorCodes},
		{"SupportedProtocolVersions", SupportedProtocolVersions, ref.SupportedProtocolVersions},
	}
	for _, l := range lists {
		if !reflect.DeepEqual(l.got, l.ref) {
			t.Errorf("%s = %q, reference %q", l.name, l.got, l.ref)
		}
	}
	if !reflect.DeepEqual(BackendClassOf, ref.BackendClassOf) {
		t.Errorf("BackendClassOf = %v, reference %v", BackendClassOf, ref.BackendClassOf)
	}
	for code, status := range ref.ErrorStatus {
		if StatusOf(code) != status {
			t.Errorf("StatusOf(%q) = %d, reference %d", code, StatusOf(code), status)
		}
	}
	consts := []struct {
		name     string
		got, ref any
	}{
		{"MaxEnvelopeBytes", int64(MaxEnvelopeBytes), ref.MaxEnvelopeBytes},
		{"MaxClockSkewMs", int64(MaxClockSkewMs), ref.MaxClockSkewMs},
		{"MaxSuccessionChain", int64(MaxSuccessionChain), ref.MaxSuccessionChain},
		{"ProtocolVersion", ProtocolVersion, ref.ProtocolVersion},
		{"MinProtocolVersion", MinProtocolVersion, ref.MinProtocolVersion},
		{"UpgradeCommand", UpgradeCommand, ref.UpgradeCommand},
		{"UpdateOfferSince", UpdateOfferSince, ref.UpdateOfferSince},
	}
	for _, c := range consts {
		if c.got != c.ref {
			t.Errorf("%s = %v, reference %v", c.name, c.got, c.ref)
		}
	}
}
