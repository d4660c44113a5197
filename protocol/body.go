package protocol

import "net/url"

// Body is a request body parsed once, for a handler that runs the
// handshake and then one or more strict decodes on the same bytes: the
// relay's pair endpoint tries three schemas on one body, and a result or
// payload body is 6 MiB. Its answers are CheckVersion's and DecodeStrict's
// on the raw bytes, decision for decision and byte for byte; it only saves
// parsing them again.
//
// A handler uses it as: body := protocol.ParseBody(raw) (raw nil for
// anything but a POST, as for CheckVersion), then body.CheckVersion(query)
// in place of CheckVersion(raw, query), and body.Decode(&req) in place of
// DecodeStrict(raw, &req). Each of those called on raw instead parses the
// bytes again: a handler that mixes them parses more than once.
//
// A Body is read-only after ParseBody and safe to share between
// goroutines. Decoded strings share memory with it, never with raw: the
// caller may reuse raw once ParseBody returns.
type Body struct {
	root node
	err  error // the parse's; a body that is not JSON still has a version (the query's)
	// problem is CheckBody's answer for the raw bytes (Check).
	problem *BodyError
}

// ParseBody reads raw as the reference relay does (BodyText, then
// JSON.parse) and keeps the result, or the failure, for CheckVersion and
// Decode, and CheckBody's answer on raw for Check.
func ParseBody(raw []byte) *Body {
	root, err := parseJSON(raw)
	problem := textProblem(raw)
	if problem == nil {
		// Valid UTF-8 without a BOM is its own text, so the parse above
		// was of raw itself and its offsets are raw's.
		problem = shapeProblem(root, err)
	}
	return &Body{root: root, err: err, problem: problem}
}

// CheckVersion is CheckVersion(raw, query).
func (b *Body) CheckVersion(query url.Values) *WireError {
	return versionDecision(declaredIn(b.root, b.err, query))
}

// Decode is DecodeStrict(raw, v).
func (b *Body) Decode(v Validator) error {
	rv, err := decodeTarget(v)
	if err != nil {
		return err
	}
	return decodeParsed(b.root, b.err, rv, v)
}
