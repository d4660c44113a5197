package protocol

import "net/url"

// Body is a request body parsed once, for every reader of it: the
// handshake (Handshake), the body rule (Check) and one or more strict
// decodes (Decode) on the same bytes. The relay parses each request's body
// once, in dispatch, and every plane reads that Body; its pair endpoint
// tries three schemas on it, and a result or payload body is 6 MiB, so a
// second parse is a second full scan. Its answers are Handshake's,
// CheckBody's, CheckVersion's and DecodeStrict's on the raw bytes,
// decision for decision and byte for byte; it only saves parsing them
// again.
//
// The parse is deep, so a body refused before authentication has been
// built all the same; MaxEnvelopeBytes bounds what that costs, and an
// accepted body is built once rather than scanned and then built.
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

// Handshake is Handshake(raw, query).
func (b *Body) Handshake(query url.Values) *WireError {
	switch b.problem {
	case nil:
		return versionDecision(declaredIn(b.root, nil, query))
	case errBodyEmpty:
		// No body: the version is the query's.
		return b.CheckVersion(query)
	}
	refusal := b.problem.WireError()
	return &refusal
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
