package seal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/byorelay/byorelay/internal/stream"
	"github.com/byorelay/byorelay/protocol"
)

// TypeSealed is the event type of a sealed frame on the attach wire; every
// other event is one of the relay's clear stream frames (open, durable,
// stale, absent).
const TypeSealed = "sealed"

// Event is one event of the attach wire, as the relay sends it.
type Event struct {
	Sealed *Frame        // a daemon's sealed frame, or
	Clear  *stream.Frame // a frame the relay itself says
}

// sealedJSON is a sealed frame with its event type, in wire order.
type sealedJSON struct {
	Type string `json:"type"`
	Frame
}

// MarshalJSON writes a sealed frame as {"type":"sealed",...} and a clear
// frame as stream.Frame does.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Sealed != nil {
		return json.Marshal(sealedJSON{TypeSealed, *e.Sealed})
	}
	if e.Clear != nil {
		return json.Marshal(*e.Clear)
	}
	return nil, errors.New("seal: empty event")
}

// UnmarshalJSON decodes strictly: unknown fields are refused.
func (e *Event) UnmarshalJSON(b []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("seal: event: %w", err)
	}
	if head.Type != TypeSealed {
		var f stream.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		*e = Event{Clear: &f}
		return nil
	}
	var s sealedJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("seal: sealed frame: %w", err)
	}
	*e = Event{Sealed: &s.Frame}
	return nil
}

// errUnauthentic is a sealed frame that does not open under the key.
var errUnauthentic = errors.New("frame does not authenticate")

// open authenticates and decrypts one sealed frame into a stream frame.
func open(k Key, f Frame) (stream.Frame, error) {
	if f.N < 0 || f.From < 0 || f.Seq < f.From {
		return stream.Frame{}, errors.New("malformed counters")
	}
	raw, err := protocol.UnB64(f.CT)
	if err != nil || len(raw) < chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead {
		return stream.Frame{}, errors.New("malformed ciphertext")
	}
	aead, err := chacha20poly1305.NewX(k.k[:])
	if err != nil {
		return stream.Frame{}, err
	}
	nonce, ct := raw[:chacha20poly1305.NonceSizeX], raw[chacha20poly1305.NonceSizeX:]
	plain, err := aead.Open(nil, nonce, ct, aad(f))
	if err != nil {
		return stream.Frame{}, errUnauthentic
	}
	switch f.Kind {
	case KindChunk:
		text := string(plain)
		if !utf8.ValidString(text) || stream.UTF16Len(text) != f.Seq-f.From || f.Seq == f.From {
			return stream.Frame{}, errors.New("chunk text does not match its offsets")
		}
		return stream.Chunk(f.From, text), nil
	case KindEnd:
		var e endPlain
		dec := json.NewDecoder(bytes.NewReader(plain))
		dec.DisallowUnknownFields()
		if f.From != f.Seq || dec.Decode(&e) != nil || !e.Status.Final() {
			return stream.Frame{}, errors.New("malformed end")
		}
		return stream.End(f.Seq, e.Status, e.Error), nil
	}
	return stream.Frame{}, fmt.Errorf("unknown kind %q", f.Kind)
}

// Reader is the site's whole receiving side of one stream: it decodes each
// event, opens sealed frames and checks their counters (each frame the
// successor of the last, its text starting where the last ended), refuses
// text the relay did not get from the daemon, runs the conform pass and
// assembles the text. Every failure ends the stream `stale`: the sealed
// result is still coming, so a reader loses smoothness, never correctness.
type Reader struct {
	key         Key
	conform     *stream.Conform
	asm         *stream.Assembler
	started     bool  // a sealed frame has been accepted
	next        int64 // the counter the next sealed frame must carry
	prevSeq     int64 // where the last accepted sealed frame ended
	onViolation func(Violation)
}

// Violation is why a reader's stream ended stale.
type Violation struct {
	// Unopened: a sealed frame did not authenticate under the stream's
	// key. It was altered or forged on the way, or it was sealed for
	// another stream (another lease's run of the job); every other
	// violation is the relay breaking the lane's rules.
	Unopened bool
	Reason   string
}

// NewReader reads stream streamID from offset from, holding held (the text
// the reader already has, at least from code units of it). onViolation, if
// not nil, hears why a stream ended stale.
func NewReader(k Key, streamID string, from int64, held string, onViolation func(Violation)) *Reader {
	r := &Reader{key: k, asm: stream.NewAssembler(held), onViolation: onViolation}
	r.conform = stream.NewConform(streamID, from, func(reason string) { r.report(Violation{Reason: reason}) })
	return r
}

func (r *Reader) report(v Violation) {
	if r.onViolation != nil {
		r.onViolation(v)
	}
}

// Feed takes one raw event and returns the conformed frames it yields,
// already applied to the text.
func (r *Reader) Feed(raw []byte) []stream.Frame {
	if r.conform.Done() {
		return nil
	}
	var e Event
	if err := json.Unmarshal(raw, &e); err != nil {
		return r.fail(err.Error())
	}
	var f stream.Frame
	switch {
	case e.Sealed != nil:
		s := *e.Sealed
		if r.started && (s.N != r.next || s.From != r.prevSeq) {
			return r.fail(fmt.Sprintf("frame %d [%d,%d) where frame %d from %d was due", s.N, s.From, s.Seq, r.next, r.prevSeq))
		}
		opened, err := open(r.key, s)
		if err != nil {
			return r.failWith(Violation{Unopened: errors.Is(err, errUnauthentic), Reason: fmt.Sprintf("frame %d: %v", s.N, err)})
		}
		r.started, r.next, r.prevSeq = true, s.N+1, s.Seq
		f = opened
	case e.Clear.Type == stream.TypeChunk || e.Clear.Type == stream.TypeEnd:
		// Text and the seal come only from the daemon, sealed.
		return r.fail(fmt.Sprintf("clear %s frame from the relay", e.Clear.Type))
	default:
		f = *e.Clear
	}
	return r.apply(r.conform.Feed(f))
}

// End is called when the event source finished without a terminal.
func (r *Reader) End() []stream.Frame { return r.apply(r.conform.End()) }

// Fail is called when the event source failed.
func (r *Reader) Fail() []stream.Frame { return r.apply(r.conform.Fail()) }

func (r *Reader) fail(reason string) []stream.Frame { return r.failWith(Violation{Reason: reason}) }

func (r *Reader) failWith(v Violation) []stream.Frame {
	r.report(v)
	return r.apply(r.conform.Fail())
}

func (r *Reader) apply(out []stream.Frame) []stream.Frame {
	for _, f := range out {
		// Conform passes only what the assembler can apply.
		_ = r.asm.Apply(f)
	}
	return out
}

// Text is the text assembled so far.
func (r *Reader) Text() string { return r.asm.Text() }

// Terminal is the frame that ended the stream, if it has ended.
func (r *Reader) Terminal() (stream.Frame, bool) { return r.asm.Terminal() }
