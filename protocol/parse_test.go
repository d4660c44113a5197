package protocol

import (
	"errors"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// parseCases are bodies at the edges of the grammar: each must be accepted
// or refused, and parsed to the same tree, exactly as the json.Decoder walk
// did.
var parseCases = []string{
	``, ` `, `{}`, `[]`, `{ }`, `[ ]`, `null`, `true`, `false`, `nul`, `tru`, `truex`, `nullnull`,
	`0`, `-0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-5`, `1.5e300`, `1e400`, `-1.0e-0`, `0x10`, `+1`, `1 2`,
	`"a"`, `"`, `"a`, `"\"`, `"\\"`, `"\\\""`, `"a\"b"`, `"\u0041"`, `"\u004"`, `"\ud800"`, `"\ud83d\ude00"`,
	`"\udc00\ud800"`, `"\x"`, `"\/"`, `"\b\f\n\r\t"`, "\"a\tb\"", "\"a\nb\"", "\"\x1f\"", "\"\x7f\"",
	"\"\u2028\"", "\"\xff\"", "\xef\xbb\xbf{}", "\xef\xbb\xbf\xef\xbb\xbf{}", "\"\xed\xa0\x80\"",
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`,
	`{"a":1}}`, `[[]`, `[]]`, `{"a":[}`, `{"a":{]}`, "\t\n\r {\"a\" : [ 1 , 2 ] } \n", "\v{}", "\u00a0{}",
	`{"a":1,"a":2}`, `{"a":1,"b":2,"a":3}`, `{"a\u0062":1,"ab":2}`, `{"":0}`, `{"protocolVersion":"2"}`,
	`{"protocolVersion":"2","protocolVersion":3}`, `{"protocolVersion":3,"protocolVersion":"2"}`,
	`{"x":{"protocolVersion":"2"}}`, `[{"protocolVersion":"2"}]`, `{"protocol\u0056ersion":"2"}`,
	`{"protocolVersion":"\u0032"}`, `{"protocolVersion":null}`, `{"protocolVersion":{"a":[1,{"b":"c"}]}}`,
	`{"protocolVersion":"2"} x`, `{"protocolVersion":"2",}`, `{"a":[1,"x",true,null,{"b":-1.5e3}],"c":{}}`,
}

func nestedCases() []string {
	var out []string
	members := make([]string, 0, 100)
	for i := range 100 {
		members = append(members, strconv.Quote("k"+strconv.Itoa(i%70))+":"+strconv.Itoa(i))
	}
	out = append(out, "{"+strings.Join(members, ",")+"}")
	out = append(out, strings.Repeat("[", 5000)+strings.Repeat("]", 5000))
	out = append(out, strings.Repeat(`{"a":`, 3000)+"1"+strings.Repeat("}", 3000))
	out = append(out, strings.Repeat("[", 5000)+strings.Repeat("]", 4999))
	return out
}

func TestParseJSONMatchesTheReference(t *testing.T) {
	for _, body := range append(parseCases, nestedCases()...) {
		checkParseAgainstReference(t, []byte(body), "protocolVersion=2")
		checkParseAgainstReference(t, []byte(body), "")
	}
}

// checkParseAgainstReference compares the parser with the json.Decoder walk
// it replaced, and the handshake's shallow parse with the full one.
func checkParseAgainstReference(t *testing.T, body []byte, rawQuery string) {
	t.Helper()
	want, wantErr := parseJSONReference(body)
	got, gotErr := parseJSON(body)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: reference error %v, parser error %v", body, wantErr, gotErr)
	}
	if wantErr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%q: trees differ\n reference %#v\n parser    %#v", body, want, got)
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return
	}
	wantV, wantOK := declaredVersionReference(body, query)
	gotV, gotOK := declaredVersion(body, query)
	ws, wantString := wantV.(string)
	gs, gotString := gotV.(string)
	if wantOK != gotOK || wantString != gotString || ws != gs {
		t.Fatalf("%q %q: declared %#v %v, reference %#v %v", body, rawQuery, gotV, gotOK, wantV, wantOK)
	}
}

// declaredVersionReference is declaredVersion as it was, on a full parse.
func declaredVersionReference(rawBody []byte, query url.Values) (any, bool) {
	if root, err := parseJSONReference(rawBody); err == nil && root.kind == kindObject {
		if m, found := root.member("protocolVersion"); found {
			return m.plain(), true
		}
	}
	if vs, found := query["protocolVersion"]; found && len(vs) > 0 {
		return vs[0], true
	}
	return nil, false
}

// The old walk recursed once per level and a body of a million '[' killed
// the process; the parser answers it.
func TestParseJSONSurvivesDeepNesting(t *testing.T) {
	depth := 1 << 20
	deep := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
	if refusal := CheckVersion(deep, nil); refusal == nil {
		t.Fatal("a deep array declares no version and must be refused")
	}
	// Parsed, then refused for its type, not as broken JSON.
	var req FetchRequest
	err := DecodeStrict(deep, &req)
	var de *DecodeError
	if !errors.As(err, &de) || de.Problem != "must be an object, not array" {
		t.Fatalf("a deep array as a FetchRequest: %v", err)
	}
}

func TestHasControl(t *testing.T) {
	for n := range 20 {
		for at := range n {
			for _, c := range []byte{0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff} {
				b := []byte(strings.Repeat("a", n))
				b[at] = c
				if got, want := hasControl(b), c < 0x20; got != want {
					t.Fatalf("hasControl(%q) = %v", b, got)
				}
			}
		}
	}
}

// FuzzParseJSONMatchesReference: the parser and the shallow handshake parse
// agree with the json.Decoder walk on any bytes.
func FuzzParseJSONMatchesReference(f *testing.F) {
	for _, s := range parseCases {
		f.Add([]byte(s), "protocolVersion=2")
	}
	f.Add([]byte(`{"protocolVersion":"2","runnerId":"r","jobId":"j","leaseId":"l","envelope":`+wireEnvelope+`,"disposition":"ok"}`), "")
	f.Fuzz(func(t *testing.T, body []byte, rawQuery string) {
		checkParseAgainstReference(t, body, rawQuery)
	})
}
