package protocol

import (
	"fmt"
	"strings"
	"testing"
)

// strMin skips counting code points when the byte length alone settles the
// bounds; it must fail exactly where counting does.
func TestStrMinMatchesCounting(t *testing.T) {
	pieces := []string{"a", "é", "€", "😀", "\xff", "\xf0\x9f"}
	for _, p := range pieces {
		for n := range 14 {
			s := strings.Repeat(p, n)
			for minLen := 0; minLen <= 6; minLen++ {
				for _, maxLen := range []int{0, 1, 3, 5, 8, 20} {
					var fast, slow check
					fast.strMin("x", s, minLen, maxLen)
					slowStrMin(&slow, "x", s, minLen, maxLen)
					if fmt.Sprint(fast.err) != fmt.Sprint(slow.err) {
						t.Fatalf("strMin(%q, %d, %d) = %v, counting says %v", s, minLen, maxLen, fast.err, slow.err)
					}
				}
			}
		}
	}
}

// slowStrMin is strMin without its shortcut.
func slowStrMin(c *check, path, s string, minLen, maxLen int) {
	n := jsLength(s)
	if n < minLen {
		if minLen == 1 {
			c.fail(path, "must not be empty")
		} else {
			c.fail(path, "must be at least "+fmt.Sprint(minLen)+" characters")
		}
		return
	}
	if maxLen > 0 && n > maxLen {
		c.fail(path, "must be at most "+fmt.Sprint(maxLen)+" characters")
	}
}
