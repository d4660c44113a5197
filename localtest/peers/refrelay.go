package peers

import (
	"testing"
)

// StartReferenceRelay serves @byollm/relay 0.1.1 (ref-relay.mjs) on
// loopback and returns its origin. Its admin routes answer as byorelay's
// admin API does for the calls the peer tests make (POST /admin/sites,
// /admin/consents, /admin/pairings/approve), so controlplane.Client drives
// both. With controlPlane, the relay hands daemons a grant-signing key at
// pairing and signs a grant for every job it routes.
func StartReferenceRelay(t testing.TB, controlPlane bool) string {
	t.Helper()
	args := []string{}
	if controlPlane {
		args = append(args, "--controlPlane", "on")
	}
	s := Start(t, "ref-relay.mjs", nil, args...)
	var listening struct {
		Origin string `json:"origin"`
	}
	s.Wait(t, "listening", StepTimeout).Decode(t, &listening)
	return listening.Origin
}
