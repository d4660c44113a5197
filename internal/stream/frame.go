package stream

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Type names a frame (rindle's frame catalogue).
type Type string

const (
	// TypeOpen is the first frame of a join: the reader's position.
	TypeOpen Type = "open"
	// TypeChunk carries produced text [From, Seq).
	TypeChunk Type = "chunk"
	// TypeDurable says the store holds everything up to Seq.
	TypeDurable Type = "durable"
	// TypeEnd is the seal. Terminal.
	TypeEnd Type = "end"
	// TypeStale tells the reader to go to the durable plane (for byollm: the
	// sealed result). Terminal.
	TypeStale Type = "stale"
	// TypeAbsent says there is no live stream for this id. Terminal.
	TypeAbsent Type = "absent"
)

// Status is a stream's state; every status but StatusStreaming is final.
type Status string

const (
	StatusStreaming   Status = "streaming"
	StatusComplete    Status = "complete"
	StatusCancelled   Status = "cancelled"
	StatusError       Status = "error"
	StatusInterrupted Status = "interrupted"
)

// Final reports whether s is one of the four statuses an `end` may carry.
func (s Status) Final() bool {
	switch s {
	case StatusComplete, StatusCancelled, StatusError, StatusInterrupted:
		return true
	}
	return false
}

// Frame is one frame of any type. Which fields are meaningful depends on
// Type:
//
//	open     StreamID, From, Seq, DurableSeq, Ended
//	chunk    From, Seq, Text          (UTF16Len(Text) == Seq-From)
//	durable  Seq
//	end      Seq, Status, Error       (Seq is the durable length at the seal)
//	stale    FloorSeq, DurableSeq
//	absent   nothing
//
// One struct rather than six keeps the conform pass a switch over Type, the
// shape of the reference; MarshalJSON writes exactly the fields of the type.
type Frame struct {
	Type       Type
	StreamID   string
	From       int64
	Seq        int64
	DurableSeq int64
	Ended      bool
	Text       string
	Status     Status
	Error      string
	FloorSeq   int64
}

// Terminal reports whether f finishes a subscription: every subscription
// ends after exactly one of end, stale or absent.
func (f Frame) Terminal() bool {
	return f.Type == TypeEnd || f.Type == TypeStale || f.Type == TypeAbsent
}

// ResumePoint is the offset a reader holds once it has applied f, used as
// the SSE event id so a reconnecting EventSource resumes there
// (rindle's frameResumePoint). Only positional frames have one: open (its
// From), chunk and durable (their Seq). rindle's exact per-type mapping
// lives in @rindle/client, which we could not read; this is ours.
func (f Frame) ResumePoint() (int64, bool) {
	switch f.Type {
	case TypeOpen:
		return f.From, true
	case TypeChunk, TypeDurable:
		return f.Seq, true
	}
	return 0, false
}

// Open, Chunk, Durable, End, Stale and Absent build frames.

func Open(streamID string, from, seq, durableSeq int64, ended bool) Frame {
	return Frame{Type: TypeOpen, StreamID: streamID, From: from, Seq: seq, DurableSeq: durableSeq, Ended: ended}
}

func Chunk(from int64, text string) Frame {
	return Frame{Type: TypeChunk, From: from, Seq: from + UTF16Len(text), Text: text}
}

func Durable(seq int64) Frame { return Frame{Type: TypeDurable, Seq: seq} }

func End(seq int64, status Status, errText string) Frame {
	return Frame{Type: TypeEnd, Seq: seq, Status: status, Error: errText}
}

func Stale(floorSeq, durableSeq int64) Frame {
	return Frame{Type: TypeStale, FloorSeq: floorSeq, DurableSeq: durableSeq}
}

func Absent() Frame { return Frame{Type: TypeAbsent} }

// UTF16Len is the length of s in UTF-16 code units, JavaScript's
// String.prototype.length. Invalid UTF-8 bytes count one unit each, as the
// U+FFFD they decode to does.
func UTF16Len(s string) int64 {
	var n int64
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 && r <= utf8.MaxRune {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// units is s as UTF-16 code units, the representation the Assembler splices.
func units(s string) []uint16 { return utf16.Encode([]rune(s)) }
