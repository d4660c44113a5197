package stream

import (
	"encoding/json"
	"reflect"
	"testing"
)

// One row per rule of rindle's StreamRelayConform, porting pitfalls included.
func TestConformFollowsEveryRuleOfTheTable(t *testing.T) {
	const id = "job_1"
	synth := func(from int64) Frame { return Open(id, from, from, from, false) }
	tests := []struct {
		name       string
		from       int64
		feed       []Frame
		want       []Frame // everything returned, in order
		violations int
		pos        int64
	}{
		{"a second open from a reconnecting adapter is absorbed", 0,
			[]Frame{Open(id, 0, 5, 0, false), Open(id, 0, 9, 0, false)},
			[]Frame{Open(id, 0, 5, 0, false)}, 0, 0},
		{"an open for another stream is a violation", 0,
			[]Frame{Open("job_2", 0, 0, 0, false)},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"an open with a negative from is a violation", 0,
			[]Frame{Open(id, -1, 0, 0, false)},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"an open whose seq is below its from is a violation", 0,
			[]Frame{Open(id, 3, 2, 0, false)},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"an open past the requested offset is a violation: it would leave a hole", 4,
			[]Frame{Open(id, 5, 9, 0, false)},
			[]Frame{Stale(4, 0)}, 1, 4},
		{"a valid open below the requested offset rewinds pos", 6,
			[]Frame{Open(id, 2, 9, 0, false)},
			[]Frame{Open(id, 2, 9, 0, false)}, 0, 2},
		{"a chunk whose text length differs from seq-from is a violation", 0,
			[]Frame{{Type: TypeChunk, From: 0, Seq: 3, Text: "ab"}},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"a chunk with a negative from is a violation", 0,
			[]Frame{{Type: TypeChunk, From: -1, Seq: 0, Text: "a"}},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"a chunk counts UTF-16 code units: an astral rune is two", 0,
			[]Frame{{Type: TypeChunk, From: 0, Seq: 1, Text: "😀"}},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"a chunk after a gap is a violation", 0,
			[]Frame{Chunk(0, "ab"), Chunk(3, "d")},
			[]Frame{synth(0), Chunk(0, "ab"), Stale(2, 0)}, 1, 2},
		{"a chunk replayed inside the delivered prefix is absorbed", 0,
			[]Frame{Chunk(0, "abc"), Chunk(1, "bc")},
			[]Frame{synth(0), Chunk(0, "abc")}, 0, 3},
		{"an overlapping chunk extending past pos is passed whole", 0,
			[]Frame{Chunk(0, "abc"), Chunk(1, "bcde")},
			[]Frame{synth(0), Chunk(0, "abc"), Chunk(1, "bcde")}, 0, 5},
		{"the first positional frame gets a synthesized open at the requested offset", 3,
			[]Frame{Chunk(3, "d")},
			[]Frame{synth(3), Chunk(3, "d")}, 0, 4},
		{"a durable beyond pos is dropped silently, not a violation", 0,
			[]Frame{Chunk(0, "ab"), Durable(3), Chunk(2, "c")},
			[]Frame{synth(0), Chunk(0, "ab"), Chunk(2, "c")}, 0, 3},
		{"a durable below the last durable is dropped silently", 0,
			[]Frame{Chunk(0, "abc"), Durable(2), Durable(1)},
			[]Frame{synth(0), Chunk(0, "abc"), Durable(2)}, 0, 3},
		{"lastDurable starts at 0, not at the open's durableSeq", 0,
			[]Frame{Open(id, 0, 4, 4, false), Chunk(0, "abcd"), Durable(1)},
			[]Frame{Open(id, 0, 4, 4, false), Chunk(0, "abcd"), Durable(1)}, 0, 4},
		{"a valid durable before any open is preceded by a synthesized open", 2,
			[]Frame{Durable(2)},
			[]Frame{synth(2), Durable(2)}, 0, 2},
		{"an end with a negative seq is a violation", 0,
			[]Frame{End(-1, StatusComplete, "")},
			[]Frame{Stale(0, 0)}, 1, 0},
		{"an end past the delivered prefix is a violation: the adapter lost text", 0,
			[]Frame{Open(id, 0, 10, 10, false), Chunk(0, "ab"), End(3, StatusComplete, "")},
			[]Frame{Open(id, 0, 10, 10, false), Chunk(0, "ab"), Stale(2, 0)}, 1, 2},
		{"an end is compared with the delivered prefix, not the producer's seq", 0,
			[]Frame{Open(id, 0, 10, 0, false), Chunk(0, "ab"), End(2, StatusError, "boom")},
			[]Frame{Open(id, 0, 10, 0, false), Chunk(0, "ab"), End(2, StatusError, "boom")}, 0, 2},
		{"an end before any open is preceded by a synthesized open", 0,
			[]Frame{End(0, StatusCancelled, "")},
			[]Frame{synth(0), End(0, StatusCancelled, "")}, 0, 0},
		{"stale is legal on its own and passed bare", 0,
			[]Frame{Stale(7, 3)},
			[]Frame{Stale(7, 3)}, 0, 0},
		{"absent is legal on its own and passed bare", 0,
			[]Frame{Absent()},
			[]Frame{Absent()}, 0, 0},
		{"after a terminal every frame is ignored", 0,
			[]Frame{Absent(), Chunk(0, "a"), End(0, StatusComplete, "")},
			[]Frame{Absent()}, 0, 0},
		{"an unknown frame type is a violation", 0,
			[]Frame{{Type: "pause"}},
			[]Frame{Stale(0, 0)}, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			violations := 0
			c := NewConform(id, tc.from, func(string) { violations++ })
			var got []Frame
			for _, f := range tc.feed {
				got = append(got, c.Feed(f)...)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("frames\n got %+v\nwant %+v", got, tc.want)
			}
			if violations != tc.violations {
				t.Errorf("violations = %d, want %d", violations, tc.violations)
			}
			if c.Pos() != tc.pos {
				t.Errorf("pos = %d, want %d", c.Pos(), tc.pos)
			}
		})
	}
}

func TestEndWithoutTerminalIsAViolationAndFailIsNot(t *testing.T) {
	var reasons []string
	c := NewConform("s", 0, func(r string) { reasons = append(reasons, r) })
	c.Feed(Chunk(0, "ab"))
	c.Feed(Durable(1))
	if got := c.End(); !reflect.DeepEqual(got, []Frame{Stale(2, 1)}) {
		t.Fatalf("End() = %+v", got)
	}
	if len(reasons) != 1 || reasons[0] != "relay source ended without a terminal frame" {
		t.Fatalf("reasons = %q", reasons)
	}
	if c.End() != nil || c.Fail() != nil || c.Feed(Absent()) != nil {
		t.Fatal("a finished conform returned frames")
	}

	reasons = nil
	c = NewConform("s", 0, func(r string) { reasons = append(reasons, r) })
	if got := c.Fail(); !reflect.DeepEqual(got, []Frame{Stale(0, 0)}) || len(reasons) != 0 {
		t.Fatalf("Fail() = %+v, reasons %q", got, reasons)
	}
}

func TestConformClampsANegativeRequestedOffsetToZero(t *testing.T) {
	c := NewConform("s", -5, nil)
	if got := c.Feed(Chunk(0, "a")); !reflect.DeepEqual(got, []Frame{Open("s", 0, 0, 0, false), Chunk(0, "a")}) {
		t.Fatalf("got %+v", got)
	}
}

func TestAssemblerSplicesAtFrameOffsetKeepsLongerPrefix(t *testing.T) {
	a := NewAssembler("hello")
	for _, f := range []Frame{Open("s", 2, 5, 0, false), Chunk(2, "l"), Chunk(2, "llo w"), Chunk(7, "orld")} {
		if err := a.Apply(f); err != nil {
			t.Fatal(err)
		}
	}
	if a.Text() != "hello world" {
		t.Fatalf("text = %q", a.Text())
	}
	if err := a.Apply(Chunk(20, "x")); err == nil {
		t.Fatal("a chunk past the held text was applied")
	}
}

func TestUTF16LenCountsLikeJavaScript(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "abc": 3, "é": 1, "€": 1, "😀": 2, "a😀b": 4, "\xff": 1} {
		if got := UTF16Len(s); got != want {
			t.Errorf("UTF16Len(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestFramesRoundTripJSONWithExactlyTheirFields(t *testing.T) {
	tests := []struct {
		frame Frame
		wire  string
	}{
		{Open("s", 1, 2, 0, true), `{"type":"open","streamId":"s","from":1,"seq":2,"durableSeq":0,"ended":true}`},
		{Chunk(2, "h😀"), `{"type":"chunk","from":2,"seq":5,"text":"h😀"}`},
		{Durable(4), `{"type":"durable","seq":4}`},
		{End(4, StatusComplete, ""), `{"type":"end","seq":4,"status":"complete"}`},
		{End(4, StatusError, "x"), `{"type":"end","seq":4,"status":"error","error":"x"}`},
		{Stale(3, 1), `{"type":"stale","floorSeq":3,"durableSeq":1}`},
		{Absent(), `{"type":"absent"}`},
	}
	for _, tc := range tests {
		b, err := json.Marshal(tc.frame)
		if err != nil || string(b) != tc.wire {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.frame, b, err, tc.wire)
		}
		var back Frame
		if err := json.Unmarshal([]byte(tc.wire), &back); err != nil || !reflect.DeepEqual(back, tc.frame) {
			t.Errorf("Unmarshal(%s) = %+v, %v", tc.wire, back, err)
		}
	}
}

func TestTheDecoderRefusesFramesNotWellFormed(t *testing.T) {
	for _, wire := range []string{
		`{}`,
		`{"type":"pause"}`,
		`{"type":"chunk","from":0,"seq":1}`,
		`{"type":"chunk","from":0.5,"seq":1,"text":"a"}`,
		`{"type":"chunk","from":"0","seq":1,"text":"a"}`,
		`{"type":"chunk","from":0,"seq":1,"text":"a","status":"complete"}`,
		`{"type":"chunk","from":0,"seq":1,"text":"a","extra":1}`,
		`{"type":"end","seq":1,"status":"streaming"}`,
		`{"type":"end","seq":1,"status":"done"}`,
		`{"type":"absent","seq":1}`,
		`{"type":"durable","seq":1} {}`,
		`[]`,
	} {
		var f Frame
		if err := json.Unmarshal([]byte(wire), &f); err == nil {
			t.Errorf("Unmarshal(%s) accepted %+v", wire, f)
		}
	}
}
