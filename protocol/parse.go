package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
)

// parseJSON parses exactly one JSON value of the body's text (BodyText),
// as JSON.parse does: RFC 8259's grammar, the four whitespace characters,
// duplicate keys last-wins at the first position, and no depth limit.
//
// It replaces a json.Decoder token walk (kept in parse_reference_test.go
// and fuzzed against this one) that took about 100 ms on a 6 MiB envelope,
// paid on every result, payload and fetch. This one is a single pass over
// the bytes, with no stack of Go calls as deep as the nesting: a body of a
// million '[' would otherwise overflow the goroutine stack and kill the
// process before anyone has been authenticated.
func parseJSON(data []byte) (node, error) {
	p := jsonParser{data: BodyText(data)}
	return p.parse()
}

// syntaxError is where a body stops being one JSON value. at is a byte
// offset into the text parsed; trailing says a whole value ended before
// it and more than whitespace follows. The offset is what a refusal names:
// a sender can find the byte, and nothing of the body is quoted back.
type syntaxError struct {
	at       int
	trailing bool
	ended    bool // at is the end of the text: the value was cut short
}

func (e *syntaxError) Error() string {
	if e.trailing {
		return "data after the JSON value at offset " + strconv.Itoa(e.at)
	}
	return "not valid JSON at offset " + strconv.Itoa(e.at)
}

// fail is a syntax error at the current position.
func (p *jsonParser) fail() error {
	return &syntaxError{at: p.pos, ended: p.pos >= len(p.data)}
}

// jsonParser walks one body. With shallow set it builds only what the
// version handshake reads, the root's kind and its top-level
// "protocolVersion" member; everything else is checked and dropped.
type jsonParser struct {
	data    []byte
	pos     int
	shallow bool
}

// openValue is an array or object whose closing bracket is still ahead.
type openValue struct {
	n   node
	key string // the object member whose value is being read
	// index finds a key among many members; setMember's linear search would
	// make an object of a hundred thousand keys quadratic.
	index map[string]int
}

// indexFrom is how many members an object holds before it gets an index.
const indexFrom = 32

func (o *openValue) add(v node) {
	if o.n.kind == kindArray {
		o.n.items = append(o.n.items, v)
		return
	}
	if o.index == nil && len(o.n.members) < indexFrom {
		o.n.setMember(o.key, v)
		return
	}
	if o.index == nil {
		o.index = make(map[string]int, 2*len(o.n.members))
		for i, m := range o.n.members {
			o.index[m.key] = i
		}
	}
	if i, found := o.index[o.key]; found {
		o.n.members[i].value = v
		return
	}
	o.index[o.key] = len(o.n.members)
	o.n.members = append(o.n.members, member{key: o.key, value: v})
}

func (p *jsonParser) parse() (node, error) {
	// Pointers: growing a slice of the values themselves copied every open
	// level again and again, seconds for a million-deep body.
	var stack []*openValue
	for {
		// A value starts here.
		p.skipSpace()
		if p.pos >= len(p.data) {
			return node{}, p.fail()
		}
		var v node
		var err error
		switch c := p.data[p.pos]; c {
		case '{', '[':
			var o *openValue
			if o, v, err = p.open(c, len(stack) > 0); err != nil {
				return node{}, err
			}
			if o != nil {
				stack = append(stack, o)
				continue
			}
		default:
			keep := !p.shallow || (len(stack) == 1 && stack[0].n.kind == kindObject && stack[0].key == "protocolVersion")
			if v, err = p.scalar(c, keep); err != nil {
				return node{}, err
			}
		}
		var done bool
		if stack, v, done, err = p.ended(stack, v); err != nil || done {
			return v, err
		}
	}
}

// open starts the object or array at p.pos. An empty one is returned
// whole; any other as the container its values go into, its first key read.
// Below the root's members a shallow parse skips it, building nothing.
func (p *jsonParser) open(c byte, nested bool) (*openValue, node, error) {
	kind := kindArray
	if c == '{' {
		kind = kindObject
	}
	if p.shallow && nested {
		// Nothing below the root's members is read.
		if err := p.skip(); err != nil {
			return nil, node{}, err
		}
		return nil, node{kind: kind}, nil
	}
	p.pos++
	o := &openValue{n: node{kind: kindArray, items: []node{}}}
	closing := byte(']')
	if c == '{' {
		o.n = node{kind: kindObject, members: []member{}}
		closing = '}'
	}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == closing {
		p.pos++
		return nil, o.n, nil
	}
	if c == '{' {
		key, err := p.key(false)
		if err != nil {
			return nil, node{}, err
		}
		o.key = key
	}
	return o, node{}, nil
}

// scalar is the string, literal or number starting with c at p.pos; keep
// says whether a string's text is kept.
func (p *jsonParser) scalar(c byte, keep bool) (node, error) {
	switch c {
	case '"':
		text, err := p.string(keep)
		if err != nil {
			return node{}, err
		}
		return node{kind: kindString, text: text}, nil
	case 't':
		if !p.literal("true") {
			return node{}, p.fail()
		}
		return node{kind: kindBool, boolean: true}, nil
	case 'f':
		if !p.literal("false") {
			return node{}, p.fail()
		}
		return node{kind: kindBool}, nil
	case 'n':
		if !p.literal("null") {
			return node{}, p.fail()
		}
		return node{kind: kindNull}, nil
	}
	text, ok := p.number()
	if !ok {
		return node{}, p.fail()
	}
	return node{kind: kindNumber, text: text}, nil
}

// ended hands v, a value that just ended, to its container, closing as
// many containers as end here, until one wants its next value. done is
// the root value ending, returned as v with nothing after it.
func (p *jsonParser) ended(stack []*openValue, v node) ([]*openValue, node, bool, error) {
	for {
		if len(stack) == 0 {
			p.skipSpace()
			if p.pos != len(p.data) {
				return nil, node{}, false, &syntaxError{at: p.pos, trailing: true}
			}
			return nil, v, true, nil
		}
		top := stack[len(stack)-1]
		top.add(v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, node{}, false, p.fail()
		}
		c := p.data[p.pos]
		p.pos++
		if c == ',' {
			if top.n.kind == kindObject {
				p.skipSpace()
				key, err := p.key(false)
				if err != nil {
					return nil, node{}, false, err
				}
				top.key = key
			}
			return stack, node{}, false, nil
		}
		if (c == ']' && top.n.kind == kindArray) || (c == '}' && top.n.kind == kindObject) {
			v = top.n
			stack = stack[:len(stack)-1]
			continue
		}
		return nil, node{}, false, &syntaxError{at: p.pos - 1}
	}
}

// skip checks the one value at p.pos and moves past it, building nothing:
// parse's walk with a byte per open bracket for its stack, so a deep
// nesting costs the handshake a byte a level.
func (p *jsonParser) skip() error {
	var closers []byte
	for {
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.fail()
		}
		switch c := p.data[p.pos]; c {
		case '{', '[':
			p.pos++
			closing := byte(']')
			if c == '{' {
				closing = '}'
			}
			p.skipSpace()
			if p.pos < len(p.data) && p.data[p.pos] == closing {
				p.pos++
				break
			}
			if c == '{' {
				if _, err := p.key(true); err != nil {
					return err
				}
			}
			closers = append(closers, closing)
			continue
		case '"':
			if _, err := p.string(false); err != nil {
				return err
			}
		case 't':
			if !p.literal("true") {
				return p.fail()
			}
		case 'f':
			if !p.literal("false") {
				return p.fail()
			}
		case 'n':
			if !p.literal("null") {
				return p.fail()
			}
		default:
			if _, ok := p.number(); !ok {
				return p.fail()
			}
		}
		for {
			if len(closers) == 0 {
				return nil
			}
			p.skipSpace()
			if p.pos >= len(p.data) {
				return p.fail()
			}
			c := p.data[p.pos]
			p.pos++
			top := closers[len(closers)-1]
			if c == ',' {
				if top == '}' {
					p.skipSpace()
					if _, err := p.key(true); err != nil {
						return err
					}
				}
				break
			}
			if c == top {
				closers = closers[:len(closers)-1]
				continue
			}
			return &syntaxError{at: p.pos - 1}
		}
	}
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// key reads `"name" :` and returns the name, or "" when discard says no
// one will look at it.
func (p *jsonParser) key(discard bool) (string, error) {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", p.fail()
	}
	key, err := p.string(!discard)
	if err != nil {
		return "", err
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return "", p.fail()
	}
	p.pos++
	return key, nil
}

// string reads the string at p.pos (its opening quote) and returns its
// text when keep is set. The text is valid UTF-8 already (BodyText), so a
// string without a backslash is its bytes; one with escapes is decoded by
// encoding/json, the decoder the old parser used, so a lone surrogate
// escape still becomes U+FFFD exactly as it did.
func (p *jsonParser) string(keep bool) (string, error) {
	start := p.pos
	i := start + 1
	escaped := false
	for {
		j := bytes.IndexByte(p.data[i:], '"')
		if j < 0 {
			// Unterminated: the body ends inside the string.
			return "", &syntaxError{at: len(p.data), ended: true}
		}
		k := bytes.IndexByte(p.data[i:i+j], '\\')
		if k < 0 {
			i += j
			break
		}
		// Skip the backslash and the character it escapes, which may be
		// the quote just found.
		escaped = true
		i += k + 2
		if i > len(p.data) {
			return "", &syntaxError{at: len(p.data), ended: true}
		}
	}
	p.pos = i + 1
	body := p.data[start+1 : i]
	if hasControl(body) {
		return "", &syntaxError{at: start + 1 + firstControl(body)}
	}
	if !escaped {
		if !keep {
			return "", nil
		}
		return string(body), nil
	}
	var s string
	if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
		// A bad escape; the string's opening quote is where to look.
		return "", &syntaxError{at: start}
	}
	return s, nil
}

// hasControl reports a byte below 0x20, which JSON refuses raw inside a
// string. Eight bytes at a time: this runs over every byte of a 6 MiB
// ciphertext.
func hasControl(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		// A byte below 0x20 borrows into its high bit, which it did not
		// have; bytes at or above 0x80 are masked out by ^w.
		if (w-0x20*ones)&^w&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// firstControl is the index of hasControl's byte, on the failure path only.
func firstControl(b []byte) int {
	for i, c := range b {
		if c < 0x20 {
			return i
		}
	}
	return len(b)
}

func (p *jsonParser) literal(word string) bool {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return false
	}
	p.pos += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and returns
// its literal text, which is what a node keeps.
func (p *jsonParser) number() (string, bool) {
	d := p.data
	start, i := p.pos, p.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return "", false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return "", false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return "", false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	p.pos = i
	return string(d[start:i]), true
}
