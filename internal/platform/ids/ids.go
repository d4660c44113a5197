// Package ids mints the random identifiers both stacks hand out: lease
// ids, job ids, runner ids, write ids.
package ids

import (
	"crypto/rand"
	"fmt"
)

// UUID mints a random (version 4) UUID. A UUID rather than a readable
// composite, because a site's Postgres adapter stores lease ids in a uuid
// column: a relay minting "lease_<job>_<time>" would route perfectly against
// a memory store and fail the moment a real site adopted the lease.
func UUID() string {
	var b [16]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (it aborts the program instead).
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
