package protocol

// plainPrefix is how many leading bytes of s, a multiple of eight, are
// printable ASCII other than '"' and '\': bytes JSON.stringify writes as
// themselves and counts as one unit each. Eight at a time, because the
// encoder and the envelope meter run over every byte of a 6 MiB ciphertext.
func plainPrefix(s string) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for b := s; len(b) >= 8; b = b[8:] {
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		quote, backslash := w^('"'*ones), w^('\\'*ones)
		// Each term is nonzero exactly when some byte is, in turn, at or
		// above 0x80, below 0x20, '"' or '\' (the borrow tricks are exact
		// for "some byte" once the high-bit bytes are excluded).
		special := w&highs |
			(w-0x20*ones)&^w&highs |
			(quote-ones)&^quote&highs |
			(backslash-ones)&^backslash&highs
		if special != 0 {
			break
		}
		i += 8
	}
	return i
}
