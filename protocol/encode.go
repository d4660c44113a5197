package protocol

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MarshalJS encodes v the way the reference's JSON.stringify would: struct
// fields in declaration order (the order the reference writes its keys),
// absent optional fields omitted rather than null, nil slices as [] (a JS
// array is never null), no HTML escaping, and U+2028/U+2029 written raw.
// encoding/json differs on those last two, and a relay answering with
// different bytes breaks anything that hashes or signs a body.
//
// Struct tags are read like encoding/json's: name, "omitempty" (omit "",
// 0, false, nil, empty slice) and "omitzero" (omit the zero value: a nil
// slice is omitted, an empty non-nil one is written as []). Map keys are
// written in JS enumeration order (array-index keys ascending, then the
// rest sorted, since a Go map has no insertion order; use Record when the
// order matters).
func MarshalJS(v any) ([]byte, error) {
	// Most answers are a few hundred bytes: one allocation up front rather
	// than append's doubling from nothing.
	return appendJS(make([]byte, 0, 512), reflect.ValueOf(v))
}

// Encode is MarshalJS for wire bodies.
func Encode(v any) ([]byte, error) {
	return MarshalJS(v)
}

// EncodeTo is Encode appending to buf: the same bytes, written into memory
// the caller reuses from one answer to the next.
func EncodeTo(buf []byte, v any) ([]byte, error) {
	return appendJS(buf, reflect.ValueOf(v))
}

// jsAppender is implemented by types that write their own JS encoding.
type jsAppender interface {
	appendJS(buf []byte) ([]byte, error)
}

func (r Record[V]) appendJS(buf []byte) ([]byte, error) {
	buf = append(buf, '{')
	for n, i := range r.jsOrder() {
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSString(buf, r[i].Key)
		buf = append(buf, ':')
		var err error
		buf, err = appendJS(buf, reflect.ValueOf(r[i].Value))
		if err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

var (
	jsAppenderType = reflect.TypeFor[jsAppender]()
	marshalerType  = reflect.TypeFor[json.Marshaler]()
)

// typeInfo is what appendJS needs to know about a type, worked out once per
// type rather than on every value: reflection over interfaces and struct
// tags was most of the cost of encoding a small answer.
type typeInfo struct {
	appender  bool // implements jsAppender
	marshaler bool // implements json.Marshaler
	fields    []wireField
}

var typeInfos sync.Map // reflect.Type -> *typeInfo

func infoFor(t reflect.Type) *typeInfo {
	if ti, ok := typeInfos.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := &typeInfo{appender: t.Implements(jsAppenderType), marshaler: t.Implements(marshalerType)}
	if t.Kind() == reflect.Struct {
		ti.fields = wireFields(t)
		for i := range ti.fields {
			ti.fields[i].key = append(appendJSString(nil, ti.fields[i].name), ':')
		}
	}
	actual, _ := typeInfos.LoadOrStore(t, ti)
	return actual.(*typeInfo)
}

func appendJS(buf []byte, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return append(buf, "null"...), nil
	}
	ti := infoFor(v.Type())
	if ti.appender {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return append(buf, "null"...), nil
		}
		return v.Interface().(jsAppender).appendJS(buf)
	}
	if ti.marshaler {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return append(buf, "null"...), nil
		}
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return nil, err
		}
		// Someone else's bytes: re-encode them, keeping their key order,
		// so the escaping and number rules are ours.
		n, err := parseJSON(b)
		if err != nil {
			return nil, fmt.Errorf("MarshalJSON of %s: %w", v.Type(), err)
		}
		return appendNode(buf, n)
	}
	switch v.Kind() {
	case reflect.String:
		if v.Type() == reflect.TypeFor[json.Number]() {
			return append(buf, v.String()...), nil
		}
		return appendJSString(buf, v.String()), nil
	case reflect.Bool:
		return strconv.AppendBool(buf, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(buf, v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(buf, v.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		// encoding/json formats floats as ES6 Number#toString does.
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return nil, err
		}
		return append(buf, b...), nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(buf, "null"...), nil
		}
		return appendJS(buf, v.Elem())
	case reflect.Slice, reflect.Array:
		buf = append(buf, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendJS(buf, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case reflect.Map:
		return appendJSMap(buf, v)
	case reflect.Struct:
		return appendJSStruct(buf, v, ti.fields)
	}
	return nil, fmt.Errorf("protocol: cannot encode %s", v.Type())
}

func appendJSMap(buf []byte, v reflect.Value) ([]byte, error) {
	if v.Type().Key().Kind() != reflect.String {
		return nil, fmt.Errorf("protocol: map key %s is not a string", v.Type().Key())
	}
	keys := make([]string, 0, v.Len())
	for _, k := range v.MapKeys() {
		keys = append(keys, k.String())
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, aInt := arrayIndex(a)
		y, bInt := arrayIndex(b)
		switch {
		case aInt && bInt:
			return int(int64(x) - int64(y))
		case aInt:
			return -1
		case bInt:
			return 1
		}
		return strings.Compare(a, b)
	})
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSString(buf, k)
		buf = append(buf, ':')
		var err error
		kv := reflect.ValueOf(k).Convert(v.Type().Key())
		if buf, err = appendJS(buf, v.MapIndex(kv)); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

func appendJSStruct(buf []byte, v reflect.Value, fields []wireField) ([]byte, error) {
	buf = append(buf, '{')
	first := true
	for _, f := range fields {
		fv := v.Field(f.index)
		if f.omitEmpty && isEmptyValue(fv) {
			continue
		}
		if f.omitZero && fv.IsZero() {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(buf, f.key...)
		var err error
		if buf, err = appendJS(buf, fv); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// wireField is one JSON-visible struct field.
type wireField struct {
	index     int
	name      string
	omitEmpty bool
	omitZero  bool
	// hasDefault: absent on input is legal (a zod default), but the field
	// is always written on output.
	hasDefault bool
	// key is the name encoded, with its colon (set by infoFor).
	key []byte
}

func (f wireField) optional() bool { return f.omitEmpty || f.omitZero || f.hasDefault }

func wireFields(t reflect.Type) []wireField {
	var fields []wireField
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		f := wireField{index: i, name: name, hasDefault: sf.Tag.Get("wire") == "default"}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero":
				f.omitZero = true
			}
		}
		fields = append(fields, f)
	}
	return fields
}

// appendJSString writes s as JSON.stringify does: the two-character escapes
// (\" \\ \b \f \n \r \t), \u00xx in lowercase hex for the other control
// characters, and everything else raw, including <, >, &, U+2028 and
// U+2029. Invalid UTF-8 cannot come from a JS string; it is written as
// U+FFFD, which is what a JS reader would have decoded it to.
//
// Runs that need no change are copied whole rather than byte by byte: a
// 6 MiB base64url ciphertext is one run, and a relay writes one on every
// fetch.
func appendJSString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	if len(s) > 1024 {
		// One allocation for the string and what usually follows it,
		// rather than append's growth copying a 6 MiB buffer twice.
		buf = slices.Grow(buf, len(s)+1024)
	}
	buf = append(buf, '"')
	start := 0 // s[start:i] is still to be copied as is
	for i := 0; i < len(s); {
		i += plainPrefix(s[i:])
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"':
				buf = append(buf, '\\', '"')
			case '\\':
				buf = append(buf, '\\', '\\')
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = utf8.AppendRune(buf, utf8.RuneError)
			start = i + 1
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// appendNode writes a parsed value as JSON.stringify(JSON.parse(text))
// would: numbers normalised, array-index keys first.
func appendNode(buf []byte, n node) ([]byte, error) {
	switch n.kind {
	case kindNull:
		return append(buf, "null"...), nil
	case kindBool:
		return strconv.AppendBool(buf, n.boolean), nil
	case kindString:
		return appendJSString(buf, n.text), nil
	case kindNumber:
		f, err := strconv.ParseFloat(n.text, 64)
		if err != nil {
			return nil, fmt.Errorf("protocol: number %s out of range", n.text)
		}
		return appendJS(buf, reflect.ValueOf(f))
	case kindArray:
		buf = append(buf, '[')
		for i, it := range n.items {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendNode(buf, it); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	}
	var r Record[node]
	for _, m := range n.members {
		r.Set(m.key, m.value)
	}
	buf = append(buf, '{')
	for i, idx := range r.jsOrder() {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSString(buf, r[idx].Key)
		buf = append(buf, ':')
		var err error
		if buf, err = appendNode(buf, r[idx].Value); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}
