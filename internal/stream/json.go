package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Wire shapes, one per type, in rindle's field order. Absent optional fields
// are omitted, never null.
type (
	openJSON struct {
		Type       Type   `json:"type"`
		StreamID   string `json:"streamId"`
		From       int64  `json:"from"`
		Seq        int64  `json:"seq"`
		DurableSeq int64  `json:"durableSeq"`
		Ended      bool   `json:"ended"`
	}
	chunkJSON struct {
		Type Type   `json:"type"`
		From int64  `json:"from"`
		Seq  int64  `json:"seq"`
		Text string `json:"text"`
	}
	seqJSON struct {
		Type Type  `json:"type"`
		Seq  int64 `json:"seq"`
	}
	endJSON struct {
		Type   Type   `json:"type"`
		Seq    int64  `json:"seq"`
		Status Status `json:"status"`
		Error  string `json:"error,omitempty"`
	}
	staleJSON struct {
		Type       Type  `json:"type"`
		FloorSeq   int64 `json:"floorSeq"`
		DurableSeq int64 `json:"durableSeq"`
	}
	typeJSON struct {
		Type Type `json:"type"`
	}
)

// MarshalJSON writes exactly the fields of f's type.
func (f Frame) MarshalJSON() ([]byte, error) {
	switch f.Type {
	case TypeOpen:
		return json.Marshal(openJSON{f.Type, f.StreamID, f.From, f.Seq, f.DurableSeq, f.Ended})
	case TypeChunk:
		return json.Marshal(chunkJSON{f.Type, f.From, f.Seq, f.Text})
	case TypeDurable:
		return json.Marshal(seqJSON{f.Type, f.Seq})
	case TypeEnd:
		return json.Marshal(endJSON{f.Type, f.Seq, f.Status, f.Error})
	case TypeStale:
		return json.Marshal(staleJSON{f.Type, f.FloorSeq, f.DurableSeq})
	case TypeAbsent:
		return json.Marshal(typeJSON{f.Type})
	}
	return nil, fmt.Errorf("stream: cannot encode frame type %q", f.Type)
}

// wireFrame is every field any frame may carry; pointers tell absent from
// zero.
type wireFrame struct {
	Type       *Type   `json:"type"`
	StreamID   *string `json:"streamId"`
	From       *int64  `json:"from"`
	Seq        *int64  `json:"seq"`
	DurableSeq *int64  `json:"durableSeq"`
	Ended      *bool   `json:"ended"`
	Text       *string `json:"text"`
	Status     *Status `json:"status"`
	Error      *string `json:"error"`
	FloorSeq   *int64  `json:"floorSeq"`
}

// fieldsOf lists, per type, the fields it requires and those it may carry.
var fieldsOf = map[Type]struct{ required, optional []string }{
	TypeOpen:    {required: []string{"streamId", "from", "seq", "durableSeq", "ended"}},
	TypeChunk:   {required: []string{"from", "seq", "text"}},
	TypeDurable: {required: []string{"seq"}},
	TypeEnd:     {required: []string{"seq", "status"}, optional: []string{"error"}},
	TypeStale:   {required: []string{"floorSeq", "durableSeq"}},
	TypeAbsent:  {},
}

// UnmarshalJSON decodes strictly: a known type, every field that type
// requires, no other field, integers where offsets belong, and a final
// status on an end. A frame that fails here never reaches Conform; the
// reader's driver calls Fail, which ends the stream stale.
func (f *Frame) UnmarshalJSON(b []byte) error {
	var w wireFrame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("stream: frame: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("stream: frame: trailing data")
	}
	if w.Type == nil {
		return fmt.Errorf("stream: frame without a type")
	}
	spec, ok := fieldsOf[*w.Type]
	if !ok {
		return fmt.Errorf("stream: unknown frame type %q", *w.Type)
	}
	present := map[string]bool{
		"streamId": w.StreamID != nil, "from": w.From != nil, "seq": w.Seq != nil,
		"durableSeq": w.DurableSeq != nil, "ended": w.Ended != nil, "text": w.Text != nil,
		"status": w.Status != nil, "error": w.Error != nil, "floorSeq": w.FloorSeq != nil,
	}
	allowed := map[string]bool{}
	for _, name := range spec.required {
		if !present[name] {
			return fmt.Errorf("stream: %s frame without %s", *w.Type, name)
		}
		allowed[name] = true
	}
	for _, name := range spec.optional {
		allowed[name] = true
	}
	for name, here := range present {
		if here && !allowed[name] {
			return fmt.Errorf("stream: %s frame with %s", *w.Type, name)
		}
	}
	if w.Status != nil && !w.Status.Final() {
		return fmt.Errorf("stream: end with status %q", *w.Status)
	}
	*f = Frame{Type: *w.Type}
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&f.From, w.From)
	set(&f.Seq, w.Seq)
	set(&f.DurableSeq, w.DurableSeq)
	set(&f.FloorSeq, w.FloorSeq)
	if w.StreamID != nil {
		f.StreamID = *w.StreamID
	}
	if w.Ended != nil {
		f.Ended = *w.Ended
	}
	if w.Text != nil {
		f.Text = *w.Text
	}
	if w.Status != nil {
		f.Status = *w.Status
	}
	if w.Error != nil {
		f.Error = *w.Error
	}
	return nil
}
