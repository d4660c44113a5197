package protocol

import "unicode/utf8"

// BodyText is the body as the reference relay reads it: it takes
// `await request.text()`, which is WHATWG "UTF-8 decode", so a leading BOM
// is dropped and each maximal invalid UTF-8 subpart becomes one U+FFFD.
// Everything the reference does with a body (the signature's body hash,
// the version check, the schema) sees that text, not the raw bytes.
// byorelay's endpoints refuse every body that differs from its text
// (CheckBody) before they hash or parse it, so for them this is the
// identity; DecodeStrict and CheckVersion read through it to stay the
// reference's reading on any bytes. Valid UTF-8 without a BOM is returned
// as is.
func BodyText(raw []byte) []byte {
	if len(raw) >= 3 && raw[0] == 0xEF && raw[1] == 0xBB && raw[2] == 0xBF {
		raw = raw[3:]
	}
	if utf8.Valid(raw) {
		return raw
	}
	out := make([]byte, 0, len(raw)+8)
	for i := 0; i < len(raw); {
		b := raw[i]
		if b < 0x80 {
			out = append(out, b)
			i++
			continue
		}
		need, lower, upper := 0, byte(0x80), byte(0xBF)
		switch {
		case b >= 0xC2 && b <= 0xDF:
			need = 1
		case b == 0xE0:
			need, lower = 2, 0xA0
		case b == 0xED:
			need, upper = 2, 0x9F
		case b >= 0xE1 && b <= 0xEF:
			need = 2
		case b == 0xF0:
			need, lower = 3, 0x90
		case b == 0xF4:
			need, upper = 3, 0x8F
		case b >= 0xF1 && b <= 0xF3:
			need = 3
		default:
			out = utf8.AppendRune(out, utf8.RuneError)
			i++
			continue
		}
		j := i + 1
		for k := 0; k < need; k++ {
			if j >= len(raw) || raw[j] < lower || raw[j] > upper {
				break
			}
			lower, upper = 0x80, 0xBF
			j++
		}
		if j-i == need+1 {
			out = append(out, raw[i:j]...)
		} else {
			// The byte that broke the sequence is not consumed: it starts
			// the next read, as the WHATWG decoder does.
			out = utf8.AppendRune(out, utf8.RuneError)
		}
		i = j
	}
	return out
}
