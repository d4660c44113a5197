package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The string encoder and the envelope meter as they were before their
// fast paths (plain.go), kept as the reference those are compared with.

func appendJSStringReference(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
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
				if c < 0x20 {
					buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
				} else {
					buf = append(buf, c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = utf8.AppendRune(buf, utf8.RuneError)
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

func jsonStringLengthReference(s string) int64 {
	n := int64(2)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r == '\b' || r == '\t' || r == '\n' || r == '\f' || r == '\r':
			n += 2
		case r < 0x20:
			n += 6
		case r > 0xffff:
			n += 2
		default:
			n++
		}
	}
	return n
}

// stringCases puts every kind of byte the fast paths treat specially at
// every offset of an eight-byte block, in strings long enough to take them.
func stringCases() []string {
	specials := []string{"\"", "\\", "\x00", "\x1f", "\b", "\t", "\n", "\f", "\r", "\x7f", " ", "~",
		"é", "\u2028", "😀", "\xff", "\xed\xa0\x80", "\xf0\x9f", "<>&"}
	out := []string{"", "a", strings.Repeat("A", 2000), strings.Repeat("-_09azAZ", 300)}
	for _, sp := range specials {
		for at := range 17 {
			base := strings.Repeat("x", at) + sp + strings.Repeat("y", 17-at)
			out = append(out, base, base+base, strings.Repeat(base, 80))
		}
	}
	return out
}

func TestAppendJSStringMatchesTheReference(t *testing.T) {
	for _, s := range stringCases() {
		checkStringAgainstReference(t, s)
	}
}

func checkStringAgainstReference(t *testing.T, s string) {
	t.Helper()
	want := string(appendJSStringReference([]byte("pre"), s))
	if got := string(appendJSString([]byte("pre"), s)); got != want {
		t.Fatalf("appendJSString(%q)\n got  %q\n want %q", s, got, want)
	}
	if got, want := jsonStringLength(s), jsonStringLengthReference(s); got != want {
		t.Fatalf("jsonStringLength(%q) = %d, reference %d", s, got, want)
	}
	// What the reference writes is valid UTF-8 whatever s is.
	if !utf8.ValidString(want) {
		t.Fatalf("reference wrote invalid UTF-8 for %q", s)
	}
}

func FuzzAppendJSStringMatchesReference(f *testing.F) {
	for _, s := range stringCases()[:40] {
		f.Add(s)
	}
	f.Fuzz(checkStringAgainstReference)
}
