package stream

import (
	"fmt"
	"unicode/utf16"
)

// Assembler is a reader's view of a stream's text: what it already held
// (the durable prefix it joined with) spliced with every conformed frame.
// Feed it only frames that came out of a Conform.
type Assembler struct {
	text []uint16
	end  *Frame // the terminal frame, once seen
}

// NewAssembler starts from the text the reader already holds; a reader
// joining at offset from holds at least from code units of it.
func NewAssembler(held string) *Assembler {
	return &Assembler{text: units(held)}
}

// Apply applies one conformed frame. A chunk is spliced at its own offset
// (rindle's spliceStreamText: both sides are prefixes of one string, so the
// later, longer one wins). It returns an error only for a frame Conform
// would never pass, which is a bug in the caller.
func (a *Assembler) Apply(f Frame) error {
	switch f.Type {
	case TypeChunk:
		if f.From > int64(len(a.text)) {
			return fmt.Errorf("stream: chunk from %d past held text %d", f.From, len(a.text))
		}
		if f.Seq <= int64(len(a.text)) {
			// Both are prefixes of one string; the longer one is held.
			return nil
		}
		a.text = append(a.text[:f.From], units(f.Text)...)
	case TypeEnd, TypeStale, TypeAbsent:
		t := f
		a.end = &t
	}
	return nil
}

// Text is the assembled text so far.
func (a *Assembler) Text() string { return string(utf16.Decode(a.text)) }

// Len is the assembled length in UTF-16 code units.
func (a *Assembler) Len() int64 { return int64(len(a.text)) }

// Terminal is the frame that ended the stream, if any.
func (a *Assembler) Terminal() (Frame, bool) {
	if a.end == nil {
		return Frame{}, false
	}
	return *a.end, true
}
