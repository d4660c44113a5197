package protocol

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// Validator is a wire body that checks its own value rules (lengths, enums,
// ranges, cross-field refinements) once its shape has been decoded.
type Validator interface {
	Validate() error
}

// DecodeError says where and why a body was refused, e.g.
// "capabilities[0].kind: must be one of ...". It is for logs and for a
// relay that wants to say more; the reference relay's own 400 body says
// only "request failed schema validation", and a byte-exact relay serves
// that.
type DecodeError struct {
	Path    string // e.g. "capabilities[0].kind"; "" is the body itself
	Problem string
}

func (e *DecodeError) Error() string {
	if e.Path == "" {
		return "body: " + e.Problem
	}
	return e.Path + ": " + e.Problem
}

// DecodeStrict is the one entry point for every body that arrives on the
// wire. It refuses what the reference's zod schema refuses: bytes that are
// not one JSON value, unknown keys at any level (every schema is .strict()),
// null anywhere (zod's optional() does not accept it), missing required
// keys, wrong JSON types, numbers that are not safe integers where an int is
// wanted, and then whatever v.Validate refuses.
//
// Duplicate keys follow JSON.parse, which the reference decodes with: the
// last value wins, so `{"max":1,"max":"x"}` is refused for its type and
// `{"max":"x","max":1}` is accepted.
//
// v must be a pointer to a struct. The returned error is a *DecodeError.
func DecodeStrict(data []byte, v Validator) error {
	rv, err := decodeTarget(v)
	if err != nil {
		return err
	}
	root, err := parseJSON(data)
	return decodeParsed(root, err, rv, v)
}

// decodeTarget refuses a v that cannot be decoded into, before any parse.
func decodeTarget(v Validator) (reflect.Value, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return rv, fmt.Errorf("protocol: DecodeStrict needs a non-nil pointer, got %T", v)
	}
	return rv, nil
}

// decodeParsed is DecodeStrict after the parse (err is the parse's) and
// the check of v; rv is v's reflect.Value.
func decodeParsed(root node, err error, rv reflect.Value, v Validator) error {
	if err != nil {
		return &DecodeError{Problem: "not valid JSON"}
	}
	target := rv.Elem()
	target.SetZero()
	if err := bindValue(target, root, ""); err != nil {
		return err
	}
	return v.Validate()
}

// jsonKind is the JSON type of a parsed value.
type jsonKind int

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// node is a parsed JSON value that keeps object key order, which a Record
// needs and map[string]any would lose.
type node struct {
	kind    jsonKind
	boolean bool
	text    string // string value, or the number's literal text
	items   []node
	members []member
}

type member struct {
	key   string
	value node
}

func (n node) member(key string) (node, bool) {
	for _, m := range n.members {
		if m.key == key {
			return m.value, true
		}
	}
	return node{}, false
}

// plain converts a node to string, bool, float64, nil, []any or
// map[string]any.
func (n node) plain() any {
	switch n.kind {
	case kindBool:
		return n.boolean
	case kindNumber:
		f, _ := strconv.ParseFloat(n.text, 64)
		return f
	case kindString:
		return n.text
	case kindArray:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = it.plain()
		}
		return out
	case kindObject:
		out := make(map[string]any, len(n.members))
		for _, m := range n.members {
			out[m.key] = m.value.plain()
		}
		return out
	}
	return nil
}

// setMember is JSON.parse's duplicate-key rule: the last value, at the
// first position.
func (n *node) setMember(key string, value node) {
	for i := range n.members {
		if n.members[i].key == key {
			n.members[i].value = value
			return
		}
	}
	n.members = append(n.members, member{key: key, value: value})
}

// nodeBinder is implemented by types that bind themselves (Record).
type nodeBinder interface {
	bindNode(n node, path string) error
}

var nodeBinderType = reflect.TypeFor[nodeBinder]()

func (r *Record[V]) bindNode(n node, path string) error {
	if n.kind != kindObject {
		return wrongType(path, "object", n)
	}
	out := make(Record[V], 0, len(n.members))
	for _, m := range n.members {
		var v V
		if err := bindValue(reflect.ValueOf(&v).Elem(), m.value, joinKey(path, m.key)); err != nil {
			return err
		}
		out.Set(m.key, v)
	}
	*r = out
	return nil
}

// safeIntegerLimit is Number.MAX_SAFE_INTEGER: zod's int() refuses beyond it.
const safeIntegerLimit = 1<<53 - 1

func bindValue(v reflect.Value, n node, path string) error {
	if v.CanAddr() && v.Addr().Type().Implements(nodeBinderType) {
		if n.kind == kindNull {
			return &DecodeError{Path: path, Problem: "must not be null"}
		}
		return v.Addr().Interface().(nodeBinder).bindNode(n, path)
	}
	if n.kind == kindNull {
		return &DecodeError{Path: path, Problem: "must not be null"}
	}
	switch v.Kind() {
	case reflect.String:
		if n.kind != kindString {
			return wrongType(path, "string", n)
		}
		v.SetString(n.text)
	case reflect.Bool:
		if n.kind != kindBool {
			return wrongType(path, "boolean", n)
		}
		v.SetBool(n.boolean)
	case reflect.Int, reflect.Int64:
		if n.kind != kindNumber {
			return wrongType(path, "integer", n)
		}
		f, err := strconv.ParseFloat(n.text, 64)
		if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > safeIntegerLimit {
			return &DecodeError{Path: path, Problem: "must be a safe integer"}
		}
		v.SetInt(int64(f))
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		if err := bindValue(elem.Elem(), n, path); err != nil {
			return err
		}
		v.Set(elem)
	case reflect.Slice:
		if n.kind != kindArray {
			return wrongType(path, "array", n)
		}
		s := reflect.MakeSlice(v.Type(), len(n.items), len(n.items))
		for i, item := range n.items {
			if err := bindValue(s.Index(i), item, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		v.Set(s)
	case reflect.Struct:
		return bindStruct(v, n, path)
	case reflect.Interface:
		v.Set(reflect.ValueOf(n.plain()))
	default:
		return fmt.Errorf("protocol: cannot decode into %s", v.Type())
	}
	return nil
}

func bindStruct(v reflect.Value, n node, path string) error {
	if n.kind != kindObject {
		return wrongType(path, "object", n)
	}
	fields := infoFor(v.Type()).fields
	seen := make([]bool, len(fields))
	for _, m := range n.members {
		idx := -1
		for i, f := range fields {
			if f.name == m.key {
				idx = i
				break
			}
		}
		at := joinKey(path, m.key)
		if idx < 0 {
			return &DecodeError{Path: at, Problem: "unknown key"}
		}
		f := fields[idx]
		fv := v.Field(f.index)
		if err := bindValue(fv, m.value, at); err != nil {
			return err
		}
		// An omitempty field's zero value is how it says "absent" on the
		// way out, so a present zero would be silently dropped. Every such
		// field is a min(1) string or a positive int in the schemas, which
		// refuse it anyway.
		if f.omitEmpty && fv.Kind() != reflect.Pointer && isEmptyValue(fv) {
			return &DecodeError{Path: at, Problem: emptyProblem(fv)}
		}
		seen[idx] = true
	}
	for i, f := range fields {
		if !seen[i] && !f.optional() {
			return &DecodeError{Path: joinKey(path, f.name), Problem: "is required"}
		}
	}
	return nil
}

func emptyProblem(v reflect.Value) string {
	if v.Kind() == reflect.String {
		return "must not be empty"
	}
	return "must be positive"
}

func wrongType(path, want string, n node) error {
	return &DecodeError{Path: path, Problem: "must be " + article(want) + want + ", not " + n.kind.String()}
}

func article(word string) string {
	switch word[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "an "
	}
	return "a "
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsLength is the length zod's min and max measure: Unicode code points
// (zod 4.6, which the reference resolves through its ^4.4.3 range, counts
// code points rather than JS .length's UTF-16 units). A decoded Go string
// is valid UTF-8, so this is its rune count.
func jsLength(s string) int {
	return utf8.RuneCountInString(s)
}

// check accumulates the first value-rule failure of a Validate method.
type check struct {
	err error
}

func (c *check) fail(path, problem string) {
	if c.err == nil {
		c.err = &DecodeError{Path: path, Problem: problem}
	}
}

// str requires 1 <= length (and length <= maxLen when maxLen > 0).
func (c *check) str(path, s string, maxLen int) {
	c.strMin(path, s, 1, maxLen)
}

func (c *check) strMin(path, s string, minLen, maxLen int) {
	// A code point is one to four bytes (an invalid byte counts as one), so
	// a string this long is within bounds without counting: counting is
	// most of the validation of a 6 MiB ciphertext.
	if len(s) >= 4*minLen && (maxLen <= 0 || len(s) <= maxLen) {
		return
	}
	n := jsLength(s)
	if n < minLen {
		if minLen == 1 {
			c.fail(path, "must not be empty")
		} else {
			c.fail(path, "must be at least "+strconv.Itoa(minLen)+" characters")
		}
		return
	}
	if maxLen > 0 && n > maxLen {
		c.fail(path, "must be at most "+strconv.Itoa(maxLen)+" characters")
	}
}

// optStr checks an optional min(1) string; "" is absent.
func (c *check) optStr(path, s string) {
	if s != "" {
		c.str(path, s, 0)
	}
}

func (c *check) enum(path, s string, vocab []string) {
	if !inVocab(vocab, s) {
		c.fail(path, "must be one of "+quoteList(vocab))
	}
}

func (c *check) literal(path, s, want string) {
	if s != want {
		c.fail(path, "must be "+strconv.Quote(want))
	}
}

func (c *check) positive(path string, n int64) {
	if n <= 0 {
		c.fail(path, "must be positive")
	}
}

func (c *check) nonNegative(path string, n int64) {
	if n < 0 {
		c.fail(path, "must not be negative")
	}
}

func (c *check) between(path string, n, lo, hi int64) {
	if n < lo || n > hi {
		c.fail(path, "must be between "+strconv.FormatInt(lo, 10)+" and "+strconv.FormatInt(hi, 10))
	}
}

// sub runs a nested validation and prefixes its path.
func (c *check) sub(path string, err error) {
	if c.err != nil || err == nil {
		return
	}
	var de *DecodeError
	if errors.As(err, &de) {
		c.err = &DecodeError{Path: joinKey(path, de.Path), Problem: de.Problem}
		return
	}
	c.err = err
}

func quoteList(vocab []string) string {
	var b []byte
	for i, v := range vocab {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, v)
	}
	return string(b)
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
