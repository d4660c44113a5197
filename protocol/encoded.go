package protocol

import (
	"reflect"
	"slices"
)

// Encoded is a value MarshalJS has already written: encoding it again
// copies its bytes. For an answer that repeats a large value on every call
// (a site's results list every done job on every poll), so the value is
// encoded once.
type Encoded []byte

func (e Encoded) appendJS(buf []byte) ([]byte, error) { return append(buf, e...), nil }

// EncodedResults is SiteResultsResponse with each row already encoded
// (MarshalJS of a SiteResult); it encodes to the same bytes
// (TestEncodedRowsEncodeAsTheWholeAnswer).
type EncodedResults struct {
	Jobs []Encoded `json:"jobs"`
}

func (r EncodedResults) appendJS(buf []byte) ([]byte, error) {
	buf = appendRows(append(buf, `{"jobs":`...), r.Jobs, 1)
	return append(buf, '}'), nil
}

// EncodedCollect is CollectResponse with each row already encoded; it
// encodes to the same bytes.
type EncodedCollect struct {
	Jobs    []Encoded `json:"jobs"`
	Evicted []string  `json:"evicted,omitempty"`
}

func (r EncodedCollect) appendJS(buf []byte) ([]byte, error) {
	buf = appendRows(append(buf, `{"jobs":`...), r.Jobs, 64*len(r.Evicted)+1)
	if len(r.Evicted) > 0 {
		var err error
		if buf, err = appendJS(append(buf, `,"evicted":`...), reflect.ValueOf(r.Evicted)); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// appendRows writes rows as a JSON array, growing buf once for the rows
// and after more bytes: an answer lists hundreds of rows, and growing
// from a few hundred bytes by doubling copied it twice over.
func appendRows(buf []byte, rows []Encoded, after int) []byte {
	n := 2 + len(rows) + after
	for _, r := range rows {
		n += len(r)
	}
	buf = slices.Grow(buf, n)
	buf = append(buf, '[')
	for i, r := range rows {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, r...)
	}
	return append(buf, ']')
}
