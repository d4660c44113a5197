package ids

import (
	"regexp"
	"testing"
)

// A UUID is version 4, RFC 4122's variant, in the canonical form a uuid
// column accepts, and two are never the same.
func TestUUIDIsVersion4(t *testing.T) {
	canonical := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := UUID()
		if !canonical.MatchString(id) {
			t.Fatalf("%q is not a canonical version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("%q minted twice", id)
		}
		seen[id] = true
	}
}
