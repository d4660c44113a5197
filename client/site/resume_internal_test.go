package site

import "testing"

// Offsets are UTF-16 code units, as the lane counts them: a character
// outside the BMP is two, and an offset inside one resumes at it.
func TestAfterUTF16CountsTheLanesUnits(t *testing.T) {
	s := "a😀b"
	for n, want := range map[int64]string{0: "a😀b", 1: "😀b", 2: "😀b", 3: "b", 4: "", 9: ""} {
		if got := afterUTF16(s, n); got != want {
			t.Fatalf("afterUTF16(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}
