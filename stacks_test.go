package byorelay

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStacksShareOnlyThePlatform: the relay stack and the site stack stand
// on internal/platform and never on each other's insides. A site function
// that linked the relay, its store or its wiring would carry their clients
// and init into every site cold start, and a change to either stack could
// break the other; the same holds the other way round.
func TestStacksShareOnlyThePlatform(t *testing.T) {
	const mod = "github.com/byorelay/byorelay/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./functions/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	relayOnly := []string{"internal/relay", "internal/lambdafn", "internal/controlplane", "store/dynamo"}
	siteOnly := []string{"internal/sitefn", "internal/siteserver", "internal/sitestore"}
	sites := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fn, deps, _ := strings.Cut(line, " ")
		name := strings.TrimPrefix(fn, mod+"functions/")
		forbidden := siteOnly
		if strings.HasPrefix(name, "site") {
			sites++
			forbidden = relayOnly
		}
		for _, dep := range strings.Fields(deps) {
			for _, f := range forbidden {
				if dep == mod+f || strings.HasPrefix(dep, mod+f+"/") {
					t.Errorf("functions/%s links %s", name, strings.TrimPrefix(dep, mod))
				}
			}
		}
	}
	if sites == 0 {
		t.Fatal("go list named no site function: the test would hold nothing")
	}
}
