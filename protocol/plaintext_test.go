package protocol

import (
	"strings"
	"testing"
)

func TestPayloadsDecodeStrictlyForTheirKind(t *testing.T) {
	cases := []struct {
		name, kind, plaintext string
		ok                    bool
	}{
		{"a generate payload", KindGenerate, `{"prompt":"hi","system":""}`, true},
		{"a chat payload", KindChat, `{"messages":[{"role":"user","content":""}]}`, true},
		{"an unknown key", KindGenerate, `{"prompt":"hi","model":"x"}`, false},
		{"an empty prompt", KindGenerate, `{"prompt":""}`, false},
		{"a chat payload under generate", KindGenerate, `{"messages":[{"role":"user","content":"x"}]}`, false},
		{"an unknown role", KindChat, `{"messages":[{"role":"tool","content":"x"}]}`, false},
		{"no messages", KindChat, `{"messages":[]}`, false},
		{"both shapes", KindGenerate, `{"prompt":"x","messages":[{"role":"user","content":"x"}]}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJobPayload(tc.plaintext, tc.kind)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestOutcomesSealToReferenceBytesAndRefuseOtherArms(t *testing.T) {
	stop := true
	out := SealedOutcome{Outcome: OKOutcome("4"), Ran: RunMetadata{Model: "m", BackendClass: "http", DurationMs: 0, Stop: "end", StopReported: &stop}}
	got, err := out.Plaintext()
	want := `{"outcome":{"outcome":"ok","text":"4"},"ran":{"model":"m","backendClass":"http","durationMs":0,"stop":"end","stopReported":true}}`
	if err != nil || got != want {
		t.Fatalf("plaintext = %s (%v), want %s", got, err, want)
	}
	failed, _ := SealedOutcome{Outcome: FailedOutcome("timeout", "slow", true), Ran: out.Ran}.Plaintext()
	if !strings.HasPrefix(failed, `{"outcome":{"outcome":"error","code":"timeout","message":"slow","retryable":true}`) {
		t.Fatalf("error plaintext = %s", failed)
	}
	if _, err := DecodeSealedOutcome(got, "ok"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"outcome":{"outcome":"ok"},"ran":{"model":"m","backendClass":"http","durationMs":0}}`,
		`{"outcome":{"outcome":"canceled","text":""},"ran":{"model":"m","backendClass":"http","durationMs":0}}`,
		`{"outcome":{"outcome":"ok","text":""},"ran":{"model":"m","backendClass":"http","durationMs":0,"spawnMs":1}}`,
		`{"outcome":{"outcome":"ok","text":""},"ran":{"model":"m","backendClass":"gpu","durationMs":0}}`,
	} {
		if _, err := DecodeSealedOutcome(bad, "ok"); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestSizeClassCountsUTF16Units(t *testing.T) {
	p := GeneratePayload(strings.Repeat("😀", 2001)) // 2 units each
	if n := p.TextLength(); n != 4002 {
		t.Fatalf("length %d, want 4002", n)
	}
	if c := SizeClassOf(p.TextLength()); c != "medium" {
		t.Fatalf("class %s", c)
	}
}
