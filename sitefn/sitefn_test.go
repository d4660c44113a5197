package sitefn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	byorelay "github.com/byorelay/byorelay"
)

// TestTheRegistryIsTheSiteTemplate: every function in the registry is a
// resource of site-template.yaml with its route, and has its directory
// under functions/.
func TestTheRegistryIsTheSiteTemplate(t *testing.T) {
	tpl := string(byorelay.SiteTemplate)
	for _, f := range Functions() {
		if !strings.Contains(tpl, "\n  "+f.LogicalID+":\n") {
			t.Errorf("%s: site-template.yaml has no resource %s", f.Name, f.LogicalID)
		}
		if f.Route != "" {
			method, path, _ := strings.Cut(f.Route, " ")
			if !strings.Contains(tpl, "Path: "+path+"\n            Method: "+method+"\n") {
				t.Errorf("%s: site-template.yaml declares no route %s", f.Name, f.Route)
			}
		}
		if _, err := os.Stat(filepath.Join("..", "functions", f.Name, "main.go")); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
}

func TestEnvNeedsATableAndPositiveDurations(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := LoadEnv(env(map[string]string{})); err == nil {
		t.Error("no TABLE_NAME was accepted")
	}
	if _, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "LEASE_MS": "-1"})); err == nil {
		t.Error("a negative LEASE_MS was accepted")
	}
	e, err := LoadEnv(env(map[string]string{"TABLE_NAME": "t", "LEASE_MS": "5000", "PAIRING_TTL_MS": "2000", "VERIFICATION_URL": "https://x/pair"}))
	if err != nil || e.LeaseMs != 5000 || e.PairingTTLMs != 2000 || e.VerificationURL != "https://x/pair" {
		t.Fatalf("%+v %v", e, err)
	}
}
