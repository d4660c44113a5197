package sitestore_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The store contract, its implementations and its suite depend on no SDK
// (a package under client/): the types they record are protocol's. An SDK
// depends on the wire and, through a site server, on a store; were the
// contract to import one, every store implementation would link a client
// and a change to a client's API would be a change to the contract.
func TestImportsNoSDK(t *testing.T) {
	const module = "github.com/byorelay/byorelay"
	out, err := exec.Command("go", "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/internal/sitestore") || !slices.Contains(deps, module+"/protocol") {
		t.Fatalf("go list -deps named neither sitestore nor protocol: %q", out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, module+"/client/") {
			t.Errorf("the site store links %s", p)
		}
	}
}
