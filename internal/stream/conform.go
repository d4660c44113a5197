package stream

import "fmt"

// Conform is the reader-side guard over what a relay yields, a port of
// rindle 0.10's StreamRelayConform. It holds the end of
// the prefix delivered so far and passes a frame only when the reader can
// apply it without a hole; everything else becomes one legal `stale`. A
// broken relay costs the reader smooth tokens, never corrupted text, and
// never reaches the producer.
//
// Conform checks offsets, not content: that a chunk's text is the
// producer's text at its offsets is what sealing (see package seal) proves.
//
// A Conform is not safe for concurrent use; one reader drives one.
type Conform struct {
	streamID string
	from     int64 // the requested join offset
	pos      int64 // end of the delivered prefix
	// lastDurable starts at 0, not at the adapter's open.durableSeq: a
	// durable frame is believed only once it arrives as a frame.
	lastDurable int64
	opened      bool
	done        bool
	onViolation func(reason string)
}

// NewConform starts a conform pass for a reader of streamID joining at from
// (clamped below at 0, as rindle's attach does; the producer's length is
// unknown here, so there is no upper clamp). onViolation, if not nil, is
// told why each violation became a `stale`; it is diagnostic only.
func NewConform(streamID string, from int64, onViolation func(reason string)) *Conform {
	if from < 0 {
		from = 0
	}
	return &Conform{streamID: streamID, from: from, pos: from, onViolation: onViolation}
}

// Pos is the end of the prefix delivered so far.
func (c *Conform) Pos() int64 { return c.pos }

// Done reports whether a terminal frame has been returned.
func (c *Conform) Done() bool { return c.done }

// Feed takes one frame from the relay and returns the frames to deliver:
// none, one, or a synthesized open followed by the frame. After a terminal
// it returns nothing.
func (c *Conform) Feed(f Frame) []Frame {
	if c.done {
		return nil
	}
	switch f.Type {
	case TypeOpen:
		if c.opened {
			// A reconnecting adapter's second open.
			return nil
		}
		if f.StreamID != c.streamID || f.From < 0 || f.Seq < f.From {
			return c.violation("malformed open")
		}
		if f.From > c.from {
			// The adapter cannot serve the requested offset: passing the
			// open on would leave a hole between what the reader has and
			// the first chunk.
			return c.violation(fmt.Sprintf("open from %d past the requested %d", f.From, c.from))
		}
		c.opened = true
		// pos may move below the requested offset: the reader splices
		// each chunk at its own offset, so replaying from lower is safe.
		c.pos = f.From
		return []Frame{f}

	case TypeChunk:
		if f.From < 0 || UTF16Len(f.Text) != f.Seq-f.From {
			return c.violation("malformed chunk")
		}
		if f.From > c.pos {
			return c.violation(fmt.Sprintf("gap: chunk from %d after delivered %d", f.From, c.pos))
		}
		if f.Seq <= c.pos {
			// A replay entirely inside the delivered prefix.
			return nil
		}
		// Passed whole, overlap and all: the reader splices at the
		// frame's own offset, so trimming it here would only add a
		// second place that can get the arithmetic wrong.
		c.pos = f.Seq
		return c.withOpen(f)

	case TypeDurable:
		// Informational: a durable the reader cannot check against what
		// it holds is dropped silently, not a violation.
		if f.Seq < c.lastDurable || f.Seq > c.pos {
			return nil
		}
		c.lastDurable = f.Seq
		return c.withOpen(f)

	case TypeEnd:
		if f.Seq < 0 {
			return c.violation("malformed end")
		}
		if f.Seq > c.pos {
			// The seal claims more than the reader was given: the adapter
			// lost text. Compared with the delivered prefix, not with any
			// seq the producer reported.
			return c.violation(fmt.Sprintf("end at %d past delivered %d", f.Seq, c.pos))
		}
		c.done = true
		return c.withOpen(f)

	case TypeStale, TypeAbsent:
		// Legal on their own: local answers carry no open either.
		c.done = true
		return []Frame{f}
	}
	// Not in rindle's table (its frames are a closed union); an unknown
	// type is something this reader cannot apply, so it ends stale.
	return c.violation(fmt.Sprintf("unknown frame type %q", f.Type))
}

// End is called when the source finished without a terminal frame.
func (c *Conform) End() []Frame {
	if c.done {
		return nil
	}
	return c.violation("relay source ended without a terminal frame")
}

// Fail is called when the source failed or the reader was dropped; the
// driver, not Conform, reports why.
func (c *Conform) Fail() []Frame {
	if c.done {
		return nil
	}
	c.done = true
	return []Frame{Stale(c.pos, c.lastDurable)}
}

func (c *Conform) withOpen(f Frame) []Frame {
	if c.opened {
		return []Frame{f}
	}
	c.opened = true
	// Suits broadcast adapters, which rightly never mirror the
	// per-subscriber open.
	return []Frame{Open(c.streamID, c.from, c.from, c.from, false), f}
}

func (c *Conform) violation(reason string) []Frame {
	if c.onViolation != nil {
		c.onViolation(reason)
	}
	return c.Fail()
}
