package protocol

import (
	"math"
	"strconv"
	"strings"
	"unicode"
)

// maxSafeInteger is Number.MAX_SAFE_INTEGER; zod's int() accepts nothing
// larger in magnitude.
const maxSafeInteger = 1<<53 - 1

// jsNumberToSafeInt applies JavaScript's Number(string) and reports whether
// the result is a safe integer (Number.isSafeInteger). The reference relay
// reads the issued-at header this way, so "1.8e12", "0x1A3185C5000" and
// " 1800000000000 " all name the same instant there and must here too.
func jsNumberToSafeInt(s string) (int64, bool) {
	v, ok := jsNumber(s)
	if !ok || math.IsInf(v, 0) || v != math.Trunc(v) || math.Abs(v) > maxSafeInteger {
		return 0, false
	}
	return int64(v), true
}

// jsNumber is Number(string) (ECMA-262 StringToNumber). ok=false is NaN.
func jsNumber(s string) (float64, bool) {
	s = strings.TrimFunc(s, isJSWhitespace)
	if s == "" {
		return 0, true
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			// Explicit base: strconv then refuses signs, underscores and a
			// second prefix, as StringToNumber does.
			u, err := strconv.ParseUint(s[2:], base, 64)
			if err != nil {
				if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
					return math.Inf(1), true // too large to be safe either way
				}
				return 0, false
			}
			return float64(u), true
		}
	}
	unsigned := strings.TrimLeft(s, "+-")
	if len(s)-len(unsigned) > 1 {
		return 0, false
	}
	if unsigned == "Infinity" {
		if s[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	if !isStrDecimal(unsigned) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
			return v, true // ±Inf or a denormal/zero, as JS rounds it
		}
		return 0, false
	}
	return v, true
}

// isStrDecimal matches StrUnsignedDecimalLiteral without "Infinity":
// digits, an optional fraction, an optional exponent, and at least one
// mantissa digit. strconv.ParseFloat alone would also take "inf", "nan",
// hex floats and underscores, none of which Number() accepts.
func isStrDecimal(s string) bool {
	i, mantissa := 0, 0
	for i < len(s) && isDigit(s[i]) {
		i++
		mantissa++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
			mantissa++
		}
	}
	if mantissa == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for i < len(s) && isDigit(s[i]) {
			i++
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isJSWhitespace is ECMA-262 WhiteSpace and LineTerminator, which
// StringToNumber trims.
func isJSWhitespace(r rune) bool {
	switch r {
	case '\t', '\v', '\f', ' ', '\u00a0', '\ufeff', '\n', '\r', '\u2028', '\u2029':
		return true
	}
	return unicode.Is(unicode.Zs, r)
}
