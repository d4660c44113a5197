package stream

import (
	"strings"
	"testing"
	"unicode/utf16"

	"pgregory.net/rapid"
)

// producerText draws a text mixing one-unit and two-unit (astral) runes,
// and returns it with the UTF-16 offset of every rune boundary: a producer
// can only ever cut its text there.
func producerText(t *rapid.T) (string, []int64) {
	runes := rapid.SliceOfN(rapid.SampledFrom([]rune{'a', 'b', ' ', 'é', '€', '😀', '𝄞'}), 0, 40).Draw(t, "runes")
	bounds := []int64{0}
	var n int64
	for _, r := range runes {
		n += int64(len(utf16.Encode([]rune{r})))
		bounds = append(bounds, n)
	}
	return string(runes), bounds
}

// slice is text[from:to) in UTF-16 offsets, both at rune boundaries.
func slice(text string, from, to int64) string {
	u := utf16.Encode([]rune(text))
	return string(utf16.Decode(u[from:to]))
}

// checkSubscription drives frames through a Conform and an Assembler the
// way a reader does and checks what every reader is promised: exactly one
// terminal, last; an open before any other positional frame; and text that
// is a prefix of the producer's.
func checkSubscription(t *rapid.T, text, held string, c *Conform, in []Frame, fail bool) *Assembler {
	var out []Frame
	for _, f := range in {
		out = append(out, c.Feed(f)...)
	}
	if fail {
		out = append(out, c.Fail()...)
	}
	out = append(out, c.End()...)

	a := NewAssembler(held)
	for i, f := range out {
		if f.Terminal() != (i == len(out)-1) {
			t.Fatalf("frame %d of %d (%+v) terminal=%v", i, len(out), f, f.Terminal())
		}
		if (f.Type == TypeChunk || f.Type == TypeDurable || f.Type == TypeEnd) && out[0].Type != TypeOpen {
			t.Fatalf("positional frame %+v without an open first: %+v", f, out)
		}
		if err := a.Apply(f); err != nil {
			t.Fatalf("conform passed a frame the reader cannot apply: %v (%+v)", err, out)
		}
	}
	if !strings.HasPrefix(text, a.Text()) {
		t.Fatalf("assembled %q is not a prefix of produced %q (frames %+v)", a.Text(), text, out)
	}
	if end, _ := a.Terminal(); end.Type == TypeEnd && end.Seq > a.Len() {
		t.Fatalf("end at %d claims more than the %d assembled", end.Seq, a.Len())
	}
	return a
}

// An adversarial relay may send any frame it likes, in any order, except
// that it cannot forge a chunk's content: that is what sealing proves (the
// seal package's tamper tests cover forged, spliced and replayed
// ciphertext). Whatever it does, the reader's text stays a prefix of the
// producer's, and the subscription ends in exactly one terminal.
func TestPropertyAdversarialRelayNeverCorruptsText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text, bounds := producerText(t)
		length := bounds[len(bounds)-1]
		from := rapid.SampledFrom(bounds).Draw(t, "from")
		offset := rapid.Int64Range(-2, length+2)
		statuses := rapid.SampledFrom([]Status{StatusComplete, StatusCancelled, StatusError, StatusInterrupted})

		frame := func(t *rapid.T) Frame {
			switch rapid.IntRange(0, 9).Draw(t, "kind") {
			case 0, 1, 2, 3: // a genuine span, possibly overlapping or replayed
				i := rapid.IntRange(0, len(bounds)-1).Draw(t, "i")
				j := rapid.IntRange(i, len(bounds)-1).Draw(t, "j")
				return Chunk(bounds[i], slice(text, bounds[i], bounds[j]))
			case 4: // a chunk whose offsets lie about its length
				i := rapid.IntRange(0, len(bounds)-1).Draw(t, "i")
				j := rapid.IntRange(i, len(bounds)-1).Draw(t, "j")
				return Frame{Type: TypeChunk, From: bounds[i], Seq: offset.Draw(t, "seq"), Text: slice(text, bounds[i], bounds[j])}
			case 5:
				id := rapid.SampledFrom([]string{"s", "other"}).Draw(t, "id")
				return Open(id, offset.Draw(t, "from"), offset.Draw(t, "seq"), offset.Draw(t, "durable"), rapid.Bool().Draw(t, "ended"))
			case 6:
				return Durable(offset.Draw(t, "seq"))
			case 7:
				return End(offset.Draw(t, "seq"), statuses.Draw(t, "status"), "")
			case 8:
				return rapid.SampledFrom([]Frame{Stale(1, 0), Absent(), {Type: "pause"}}).Draw(t, "terminal")
			default:
				return Durable(rapid.SampledFrom(bounds).Draw(t, "seq"))
			}
		}
		in := rapid.SliceOfN(rapid.Custom(frame), 0, 30).Draw(t, "frames")
		fail := rapid.Bool().Draw(t, "fail")
		checkSubscription(t, text, slice(text, 0, from), NewConform("s", from, nil), in, fail)
	})
}

// Contract S: an honest log replayed from any join offset, with the
// re-covered spans a retry after a lost acknowledgement leaves behind,
// splices with the text the reader held into exactly the produced text,
// and ends `end`.
func TestPropertyHonestReplaySplicesToTheProducedText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text, bounds := producerText(t)
		length := bounds[len(bounds)-1]
		// The producer's coalescing: ascending cut points at rune bounds.
		cuts := []int64{0}
		for _, b := range bounds[1:] {
			if b == length || rapid.Bool().Draw(t, "cut") {
				cuts = append(cuts, b)
			}
		}
		var log []Frame
		for i := 1; i < len(cuts); i++ {
			log = append(log, Chunk(cuts[i-1], slice(text, cuts[i-1], cuts[i])))
			if rapid.Bool().Draw(t, "recover") && i > 1 {
				// A retry re-covering from an older confirmed offset.
				log = append(log, Chunk(cuts[i-2], slice(text, cuts[i-2], cuts[i])))
			}
			if rapid.Bool().Draw(t, "durable") {
				log = append(log, Durable(cuts[i]))
			}
		}
		from := rapid.SampledFrom(bounds).Draw(t, "from")
		// The reader's log read starts with the first frame ending past
		// from, which may begin below it.
		var in []Frame
		openFrom := from
		for _, f := range log {
			if f.Type == TypeChunk && f.Seq > from && len(in) == 0 {
				openFrom = min(f.From, from)
			}
			if f.Seq > from || len(in) > 0 {
				in = append(in, f)
			}
		}
		in = append([]Frame{Open("s", openFrom, length, 0, false)}, in...)
		in = append(in, End(length, StatusComplete, ""))

		a := checkSubscription(t, text, slice(text, 0, from), NewConform("s", from, nil), in, false)
		if a.Text() != text {
			t.Fatalf("assembled %q, produced %q", a.Text(), text)
		}
		if end, _ := a.Terminal(); end.Type != TypeEnd || end.Status != StatusComplete {
			t.Fatalf("honest replay ended %+v", end)
		}
	})
}
