package byorelay_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	byorelay "github.com/byorelay/byorelay"
)

// cfn-lint on site-template.yaml as each lane deploys it: the direct lane
// (RelayUrl and RelaySiteId left empty, the defaults) and the cloud lane
// (both set), so the conditional daemon functions, the pump and its
// wake-ups are checked as a deploy of each sees them.
func TestSiteTemplateLanesPassCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cfn-lint is missing under CI")
		}
		t.Skip("cfn-lint is not installed (pip install cfn-lint)")
	}
	cloud := byorelay.SiteTemplate
	for param, value := range map[string]string{"RelayUrl": "https://relay.example", "RelaySiteId": "site-1"} {
		re := regexp.MustCompile(`(?m)(^  ` + param + `:\n(?:    .*\n)*?    Default: )"".*$`)
		if !re.Match(cloud) {
			t.Fatalf("site-template.yaml has no parameter %s with an empty Default", param)
		}
		cloud = re.ReplaceAll(cloud, []byte(`${1}"`+value+`"`))
	}
	for lane, tpl := range map[string][]byte{"direct": byorelay.SiteTemplate, "cloud": cloud} {
		path := filepath.Join(t.TempDir(), "site-"+lane+".yaml")
		if err := os.WriteFile(path, tpl, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(lint, path).CombinedOutput(); err != nil {
			t.Errorf("cfn-lint on the %s lane: %v\n%s", lane, err, out)
		}
	}
}

// TestTheSitePumpIsBoundedAndCloudOnly: the pump is deployed on the cloud
// lane only, with its reserved concurrency at 2 (one pump holding the
// lease and the successor a hand-over starts while it returns; more would
// only be starts that find the lease held), and the daemon endpoints on the
// direct lane only.
func TestTheSitePumpIsBoundedAndCloudOnly(t *testing.T) {
	var tpl struct {
		Resources map[string]struct {
			Type       string         `yaml:"Type"`
			Condition  string         `yaml:"Condition"`
			Properties map[string]any `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(byorelay.SiteTemplate, &tpl); err != nil {
		t.Fatal(err)
	}
	pump, ok := tpl.Resources["SitePumpFunction"]
	if !ok {
		t.Fatal("site-template.yaml has no SitePumpFunction")
	}
	if pump.Condition != "CloudLane" {
		t.Errorf("SitePumpFunction has Condition %q, want CloudLane", pump.Condition)
	}
	if rc := pump.Properties["ReservedConcurrentExecutions"]; rc != 2 {
		t.Errorf("SitePumpFunction ReservedConcurrentExecutions = %v, want 2", rc)
	}
	for _, ep := range []string{"Pair", "Claim", "Heartbeat", "Fetch", "Result", "Release"} {
		if c := tpl.Resources["Site"+ep+"Function"].Condition; c != "DirectLane" {
			t.Errorf("Site%sFunction has Condition %q, want DirectLane", ep, c)
		}
	}
	for _, name := range []string{"SitePumpWakeupGroup", "SitePumpWakeupRole", "SitePumpLagAlarm"} {
		if c := tpl.Resources[name].Condition; c != "CloudLane" {
			t.Errorf("%s has Condition %q, want CloudLane", name, c)
		}
	}
}
