package protocol

import (
	"fmt"
	"net/url"
	"reflect"
	"testing"
)

// A Body answers exactly what CheckVersion and DecodeStrict answer on the
// raw bytes: every accepted and refused wire body, every grammar edge, with
// and without a query version, decoded twice from one Body.
func TestBodyAnswersLikeTheRawCalls(t *testing.T) {
	var cases []wireCase
	cases = append(cases, wireAcceptCases()...)
	cases = append(cases, wireRefuseCases()...)
	for _, s := range parseCases {
		cases = append(cases, wireCase{name: s, v: &ResultRequest{}, in: s})
	}
	queries := []url.Values{nil, {"protocolVersion": {"2"}}, {"protocolVersion": {"1"}}}
	for _, tc := range cases {
		raw := []byte(tc.in)
		body := ParseBody(raw)
		for _, q := range queries {
			if got, want := body.CheckVersion(q), CheckVersion(raw, q); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %v: Body.CheckVersion %#v, CheckVersion %#v", tc.name, q, got, want)
			}
		}
		typ := reflect.TypeOf(tc.v).Elem()
		want := reflect.New(typ).Interface().(Validator)
		wantErr := DecodeStrict(raw, want)
		for range 2 {
			got := reflect.New(typ).Interface().(Validator)
			gotErr := body.Decode(got)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: Body.Decode %v %#v, DecodeStrict %v %#v", tc.name, gotErr, got, wantErr, want)
			}
		}
	}
	var nilTarget *ResultRequest
	if got, want := ParseBody(nil).Decode(nilTarget), DecodeStrict(nil, nilTarget); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("nil target: %v, DecodeStrict %v", got, want)
	}
}
