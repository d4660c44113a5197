package protocol

import (
	"errors"
	"net/url"
	"strconv"
	"unicode/utf8"
)

// BodyError is a request body that is not one JSON object in UTF-8, and
// what was wrong with it, in words a sender can act on: "body has bytes
// after its JSON value at offset 23", "body starts with a byte-order mark",
// "body must be a JSON object, got an array". It names offsets and kinds,
// never the body's own bytes, so nothing a caller sent is echoed into a
// response or a log an operator reads in a terminal.
//
// It is served as bad-request with status 400, the code and status the
// reference answers a body its schema refuses with; the words are ours
// (the reference says "request failed schema validation"). CheckBody says
// where the reference's answer differs more than in words.
type BodyError struct {
	Problem string
}

func (e *BodyError) Error() string { return e.Problem }

// WireError is the refusal's wire body.
func (e *BodyError) WireError() WireError { return NewWireError(CodeBadRequest, e.Problem) }

var (
	errBodyEmpty = &BodyError{Problem: "body is empty; it must be a JSON object"}
	errBodyBOM   = &BodyError{Problem: "body starts with a byte-order mark; send the JSON object without one"}
)

// CheckBody is the rule every endpoint applies to a request body before
// it believes anything in it, the version included: the body is exactly
// one JSON object, UTF-8 without a byte-order mark, and nothing but
// whitespace after the object. Checked in that order, so each refusal
// names the first thing wrong. nil when raw is such a body.
//
// The reference reads a body as text (WHATWG UTF-8 decode, BodyText) and
// so accepts two things this refuses:
//
//   - A leading byte-order mark, which the decode drops. A sender that
//     hashed the bytes it sent then fails the signature check, and is told
//     its key is wrong when its framing is.
//   - Invalid UTF-8, which the decode turns into U+FFFD. Signatures are
//     over the bytes a sender hashed, and the relay stores and forwards
//     strings byte for byte; a replacement decode would check a signature
//     over text the sender never wrote (so an honest signer is refused as
//     a bad signature) and would store, compare and forward strings nobody
//     sent (a runnerId that no longer names its signer). No conforming
//     peer sends either, so refusing both outright, before anything else,
//     costs nothing and means everything after this check reads the exact
//     bytes that were signed: BodyText(raw) is raw.
//
// Everything else this refuses (not JSON, bytes after the value, an
// array, a string, a number, null) the reference refuses too, with a 400,
// but as whichever of its later checks trips first: the handshake's
// unsupported-protocol-version "this request declared no protocol
// version" when the query declares none, else the schema's bad-request
// "request failed schema validation".
func CheckBody(raw []byte) *BodyError {
	_, problem := checkShallow(raw)
	return problem
}

// checkShallow is CheckBody with the root it parsed. Shallow: the root's
// kind and its own protocolVersion are all anyone reads here, so a 6 MiB
// body's members are checked and dropped rather than built.
func checkShallow(raw []byte) (node, *BodyError) {
	if problem := textProblem(raw); problem != nil {
		return node{}, problem
	}
	p := jsonParser{data: raw, shallow: true}
	root, err := p.parse()
	return root, shapeProblem(root, err)
}

// textProblem is what is wrong with raw as text, before it is parsed.
func textProblem(raw []byte) *BodyError {
	if len(raw) == 0 {
		return errBodyEmpty
	}
	if len(raw) >= 3 && raw[0] == 0xEF && raw[1] == 0xBB && raw[2] == 0xBF {
		return errBodyBOM
	}
	if !utf8.Valid(raw) {
		return invalidUTF8(raw)
	}
	return nil
}

// shapeProblem is CheckBody's answer for a body whose bytes are UTF-8
// without a BOM, from its parse (err is the parse's).
func shapeProblem(root node, err error) *BodyError {
	if err != nil {
		return syntaxProblem(err)
	}
	if root.kind != kindObject {
		got := root.kind.String()
		if root.kind != kindNull {
			got = article(got) + got
		}
		return &BodyError{Problem: "body must be a JSON object, got " + got}
	}
	return nil
}

func syntaxProblem(err error) *BodyError {
	var se *syntaxError
	if !errors.As(err, &se) {
		return &BodyError{Problem: "body is not valid JSON"}
	}
	at := strconv.Itoa(se.at)
	if se.trailing {
		return &BodyError{Problem: "body has bytes after its JSON value at offset " + at}
	}
	if se.ended {
		return &BodyError{Problem: "body is not valid JSON: it ends at offset " + at + " inside its value"}
	}
	return &BodyError{Problem: "body is not valid JSON at offset " + at}
}

// invalidUTF8 names the first byte that does not start or continue a
// valid UTF-8 sequence.
func invalidUTF8(raw []byte) *BodyError {
	at := 0
	for at < len(raw) {
		r, size := utf8.DecodeRune(raw[at:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		at += size
	}
	return &BodyError{Problem: "body is not valid UTF-8 at offset " + strconv.Itoa(at)}
}

// Handshake is a relay's first look at a protocol request, before
// authentication: CheckBody when there is a body, then the version
// handshake (CheckVersion), in one shallow pass over the bytes. It answers
// nil to proceed, or the refusal, served with StatusOf its code (400 for
// both bad-request and unsupported-protocol-version).
//
// The body is checked first because a version read out of a body that is
// not one JSON object is a guess: the reference finds no version in
// `{"protocolVersion":"2"} x` (JSON.parse refuses the whole text) and
// answers "this request declared no protocol version", which sends the
// daemon's author to upgrade a daemon that declared the right one. The
// direct server (@byollm/server) already orders it this way: not JSON is a
// bad-request before the version is read.
//
// An empty body is no body, as in the reference (a GET, or a POST that
// carries nothing): the version is the query's, and an endpoint that needs
// a body refuses the empty one as its schema does.
func Handshake(raw []byte, query url.Values) *WireError {
	if len(raw) == 0 {
		return CheckVersion(nil, query)
	}
	root, problem := checkShallow(raw)
	if problem != nil {
		refusal := problem.WireError()
		return &refusal
	}
	return versionDecision(declaredIn(root, nil, query))
}

// Check is CheckBody(raw) for the raw bytes this Body was parsed from,
// without parsing them again.
func (b *Body) Check() *BodyError {
	return b.problem
}
