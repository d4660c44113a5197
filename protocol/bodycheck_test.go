package protocol

import (
	"bytes"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// bodyProblemCases are bodies CheckBody refuses, each with the words it
// must use: what is wrong, and where, so a daemon's author can find it.
var bodyProblemCases = []struct {
	name, raw, problem string
}{
	{"empty", ``, "body is empty; it must be a JSON object"},
	{"BOM", "\xef\xbb\xbf{\"protocolVersion\":\"2\"}", "body starts with a byte-order mark; send the JSON object without one"},
	{"BOM before invalid UTF-8", "\xef\xbb\xbf{\"a\":\"\xff\"}", "body starts with a byte-order mark; send the JSON object without one"},
	{"invalid UTF-8 in a string", "{\"protocolVersion\":\"2\",\"runnerId\":\"r\xff\"}", "body is not valid UTF-8 at offset 36"},
	{"a lone continuation byte", "{\"a\":\"\x80\"}", "body is not valid UTF-8 at offset 6"},
	{"a surrogate in UTF-8", "{\"a\":\"\xed\xa0\x80\"}", "body is not valid UTF-8 at offset 6"},
	{"a truncated sequence at the end", "{\"a\":\"\xe2\x82", "body is not valid UTF-8 at offset 6"},
	{"bytes after the object", `{"protocolVersion":"2"} x`, "body has bytes after its JSON value at offset 24"},
	{"a second object", `{"protocolVersion":"2"}{"protocolVersion":"2"}`, "body has bytes after its JSON value at offset 23"},
	{"a stray closing brace", `{"a":1}}`, "body has bytes after its JSON value at offset 7"},
	{"a NUL after the object", "{}\x00", "body has bytes after its JSON value at offset 2"},
	{"an array", `[{"protocolVersion":"2"}]`, "body must be a JSON object, got an array"},
	{"a string", `"protocolVersion"`, "body must be a JSON object, got a string"},
	{"a number", `2`, "body must be a JSON object, got a number"},
	{"a boolean", ` true `, "body must be a JSON object, got a boolean"},
	{"null", `null`, "body must be a JSON object, got null"},
	{"cut short", `{"protocolVersion":"2"`, "body is not valid JSON: it ends at offset 22 inside its value"},
	{"an unterminated string", `{"a":"b`, "body is not valid JSON: it ends at offset 7 inside its value"},
	{"whitespace only", " \n", "body is not valid JSON: it ends at offset 2 inside its value"},
	{"a trailing comma", `{"a":1,}`, "body is not valid JSON at offset 7"},
	{"a bad literal", `{"a":nul}`, "body is not valid JSON at offset 5"},
	{"a bad closer", `{"a":[1}`, "body is not valid JSON at offset 7"},
	{"a raw control character", "{\"a\":\"x\ty\"}", "body is not valid JSON at offset 7"},
	{"a bad escape", `{"a":"\x"}`, "body is not valid JSON at offset 5"},
	{"deeply nested arrays", strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), "body must be a JSON object, got an array"},
	{"deep nesting cut short", `{"a":` + strings.Repeat("[", 100_000), "body is not valid JSON: it ends at offset 100005 inside its value"},
}

func TestCheckBodySaysWhatIsWrong(t *testing.T) {
	for _, tc := range bodyProblemCases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckBody([]byte(tc.raw))
			if got == nil || got.Problem != tc.problem {
				t.Fatalf("CheckBody = %v, want %q", got, tc.problem)
			}
			if w := got.WireError(); w.Error != CodeBadRequest || w.Message != tc.problem || StatusOf(w.Error) != 400 {
				t.Fatalf("wire body %+v", w)
			}
			if err := got.WireError().Validate(); err != nil {
				t.Fatalf("not a valid WireError: %v", err)
			}
		})
	}
}

func TestCheckBodyAcceptsOneObject(t *testing.T) {
	for _, raw := range []string{
		`{}`, " \t\r\n{ } \n", `{"protocolVersion":"2"}`, `{"protocolVersion":1}`,
		`{"a":[1,"x",true,null,{"b":-1.5e3}],"c":{}}`, `{"a":"\ud800"}`, `{"é":"😀"}`,
		`{"a":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`,
	} {
		if got := CheckBody([]byte(raw)); got != nil {
			t.Errorf("%.40q: %v", raw, got)
		}
	}
}

// Body.Check is CheckBody on the bytes the Body was parsed from, for every
// body at the edges of the grammar.
func TestBodyCheckIsCheckBody(t *testing.T) {
	cases := append(append([]string{}, parseCases...), nestedCases()...)
	for _, tc := range bodyProblemCases {
		cases = append(cases, tc.raw)
	}
	for _, raw := range cases {
		if got, want := ParseBody([]byte(raw)).Check(), CheckBody([]byte(raw)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%.60q: Body.Check %v, CheckBody %v", raw, got, want)
		}
	}
}

// The order: the body, then the version. A body that is not one object is
// refused for that, whatever it or the query declares; a well-formed body
// goes on to the handshake; an empty body is no body, and the query's
// version is the one declared.
func TestHandshakeChecksTheBodyBeforeTheVersion(t *testing.T) {
	noVersion := CheckVersion(nil, nil)
	old := CheckVersion([]byte(`{"protocolVersion":"1"}`), nil)
	q2 := url.Values{"protocolVersion": {"2"}}
	bad := func(problem string) *WireError {
		w := NewWireError(CodeBadRequest, problem)
		return &w
	}
	cases := []struct {
		name  string
		raw   string
		query url.Values
		want  *WireError
	}{
		{"a good body", `{"protocolVersion":"2"}`, nil, nil},
		{"an old version", `{"protocolVersion":"1"}`, q2, old},
		{"no version", `{"runnerId":"r"}`, nil, noVersion},
		{"the right version then bytes", `{"protocolVersion":"2"} x`, nil, bad("body has bytes after its JSON value at offset 24")},
		{"an old version then bytes", `{"protocolVersion":"1"}]`, nil, bad("body has bytes after its JSON value at offset 23")},
		{"an array with the version in the query", `[]`, q2, bad("body must be a JSON object, got an array")},
		{"null without a version", `null`, nil, bad("body must be a JSON object, got null")},
		{"a BOM before the right version", "\xef\xbb\xbf{\"protocolVersion\":\"2\"}", nil, bad("body starts with a byte-order mark; send the JSON object without one")},
		{"empty with the query's version", ``, q2, nil},
		{"empty without one", ``, nil, noVersion},
		{"empty with an old one", ``, url.Values{"protocolVersion": {"1"}}, old},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Handshake([]byte(tc.raw), tc.query); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Handshake = %+v, want %+v", got, tc.want)
			}
			if got := ParseBody([]byte(tc.raw)).Handshake(tc.query); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Body.Handshake = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzHandshake: on any bytes Handshake never panics, answers a valid
// WireError when it refuses, and agrees with CheckBody and CheckVersion,
// and a parsed Body answers both as the raw calls do;
// a body it lets through is its own text (so a signature over it is over
// the bytes sent) and one JSON object; an offset it names is where the
// problem is.
func FuzzHandshake(f *testing.F) {
	for _, tc := range bodyProblemCases {
		if len(tc.raw) < 1000 {
			f.Add([]byte(tc.raw), "")
			f.Add([]byte(tc.raw), "protocolVersion=2")
		}
	}
	for _, s := range parseCases {
		f.Add([]byte(s), "protocolVersion=2")
	}
	f.Fuzz(func(t *testing.T, raw []byte, rawQuery string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		got := Handshake(raw, q)
		if got != nil {
			if err := got.Validate(); err != nil {
				t.Fatalf("refusal is not a valid WireError: %v", err)
			}
		}
		problem := CheckBody(raw)
		body := ParseBody(raw)
		if !reflect.DeepEqual(body.Check(), problem) {
			t.Fatalf("Body.Check %v, CheckBody %v", body.Check(), problem)
		}
		if !reflect.DeepEqual(body.Handshake(q), got) {
			t.Fatalf("Body.Handshake %+v, Handshake %+v", body.Handshake(q), got)
		}
		switch {
		case len(raw) == 0:
			if !reflect.DeepEqual(got, CheckVersion(nil, q)) {
				t.Fatalf("empty body: %+v, CheckVersion %+v", got, CheckVersion(nil, q))
			}
		case problem != nil:
			if got == nil || got.Error != CodeBadRequest || got.Message != problem.Problem {
				t.Fatalf("CheckBody %v, Handshake %+v", problem, got)
			}
		default:
			if !bytes.Equal(BodyText(raw), raw) {
				t.Fatalf("passed a body that is not its own text: %q", raw)
			}
			root, err := parseJSON(raw)
			if err != nil || root.kind != kindObject {
				t.Fatalf("passed %q: %v %v", raw, root.kind, err)
			}
			if !reflect.DeepEqual(got, CheckVersion(raw, q)) {
				t.Fatalf("Handshake %+v, CheckVersion %+v", got, CheckVersion(raw, q))
			}
		}
		if problem == nil {
			return
		}
		if at, found := strings.CutPrefix(problem.Problem, "body has bytes after its JSON value at offset "); found {
			n, err := strconv.Atoi(at)
			if err != nil || n >= len(raw) || bytes.ContainsAny(raw[n:n+1], " \t\r\n") {
				t.Fatalf("%q: %s", raw, problem.Problem)
			}
			if _, err := parseJSON(raw[:n]); err != nil {
				t.Fatalf("%q: %s, but what precedes it is not a JSON value: %v", raw, problem.Problem, err)
			}
		}
	})
}
