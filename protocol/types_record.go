package protocol

// Record is a JSON object with string keys whose key order is kept, the Go
// shape of a zod `z.record(...)` built by `Object.fromEntries`. A Go map
// would sort its keys and lose the order the reference relay writes, which
// is observable on the wire.
//
// JS object semantics are kept where they differ from a list of pairs:
// setting a key that exists replaces its value in place (this is also how
// JSON.parse treats a duplicate key: last value, first position), and
// integer-like keys ("0", "17") are written first in ascending numeric
// order, as every JS engine enumerates them.
type Record[V any] []Entry[V]

// Entry is one key and value of a Record.
type Entry[V any] struct {
	Key   string
	Value V
}

// Get returns the value for key.
func (r Record[V]) Get(key string) (V, bool) {
	for _, e := range r {
		if e.Key == key {
			return e.Value, true
		}
	}
	var zero V
	return zero, false
}

// Set replaces the value of an existing key in place, or appends the key.
func (r *Record[V]) Set(key string, value V) {
	for i := range *r {
		if (*r)[i].Key == key {
			(*r)[i].Value = value
			return
		}
	}
	*r = append(*r, Entry[V]{Key: key, Value: value})
}

// Keys lists the keys in JS enumeration order.
func (r Record[V]) Keys() []string {
	keys := make([]string, 0, len(r))
	for _, i := range r.jsOrder() {
		keys = append(keys, r[i].Key)
	}
	return keys
}

// MarshalJSON lets encoding/json users get the JS bytes too.
func (r Record[V]) MarshalJSON() ([]byte, error) {
	return MarshalJS(r)
}

// jsOrder gives entry indexes in JS enumeration order: array-index keys
// ascending, then the rest in insertion order.
func (r Record[V]) jsOrder() []int {
	var ints, rest []int
	for i, e := range r {
		if _, ok := arrayIndex(e.Key); ok {
			ints = append(ints, i)
		} else {
			rest = append(rest, i)
		}
	}
	// Insertion sort: records are small, and stability is not needed since
	// Set keeps keys unique.
	for a := 1; a < len(ints); a++ {
		for b := a; b > 0; b-- {
			x, _ := arrayIndex(r[ints[b-1]].Key)
			y, _ := arrayIndex(r[ints[b]].Key)
			if x <= y {
				break
			}
			ints[b-1], ints[b] = ints[b], ints[b-1]
		}
	}
	return append(ints, rest...)
}

// arrayIndex reports whether key is a canonical JS array index ("0", or no
// leading zero, below 2^32-1), which engines enumerate before other keys.
func arrayIndex(key string) (uint64, bool) {
	if key == "" || len(key) > 10 || (len(key) > 1 && key[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n >= 1<<32-1 {
		return 0, false
	}
	return n, true
}
