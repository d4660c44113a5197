package byorelay_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	byorelay "github.com/byorelay/byorelay"
	"github.com/byorelay/byorelay/internal/relay"
)

// edgeOn are parameter values that turn every edge option on. Placeholders:
// the account id is all zeros and the domain is example.com's.
var edgeOn = map[string]string{
	"DomainName":            "relay.example.com",
	"EdgeCertificateArn":    "arn:aws:acm:us-east-1:000000000000:certificate/00000000-0000-0000-0000-000000000000",
	"OriginCertificateArn":  "arn:aws:acm:eu-west-1:000000000000:certificate/00000000-0000-0000-0000-000000000000",
	"OriginSecretParameter": "/byorelay/origin-secret",
	"OriginSecretVersion":   "3",
	"GrantKeyParameter":     "/byorelay/grant-key",
}

// lintIgnore is the W1030 suppression the edge's resources carry because
// cfn-lint checks them against the empty defaults; with real values it has
// nothing to suppress, so the rendering drops it and the ARNs are checked.
var lintIgnore = regexp.MustCompile(`(?m)^    Metadata:\n      cfn-lint:\n        config:\n          ignore_checks: \[W1030\]\n`)

// withEdgeOn is template.yaml with the edge parameters' defaults set to
// edgeOn, which cfn-lint resolves Refs to: the template as a deploy with
// the edge options on would see it. `make validate` lints this and the
// template as it stands (options off).
func withEdgeOn(t *testing.T) []byte {
	t.Helper()
	out := lintIgnore.ReplaceAll(byorelay.Template, nil)
	for name, value := range edgeOn {
		// The parameter's own Default line: the first one after its name.
		re := regexp.MustCompile(`(?m)(^  ` + name + `:\n(?:    .*\n)*?    Default: )\S.*$`)
		if !re.Match(out) {
			t.Fatalf("template.yaml has no parameter %s with a Default", name)
		}
		out = re.ReplaceAll(out, []byte(`${1}"`+value+`"`))
	}
	if lintIgnore.Match(out) || strings.Contains(string(out), "ignore_checks: [W1030]") {
		t.Fatal("a W1030 suppression survived the rendering")
	}
	return out
}

func TestTemplateWithTheEdgeOnPassesCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cfn-lint is missing under CI")
		}
		t.Skip("cfn-lint is not installed (pip install cfn-lint)")
	}
	path := filepath.Join(t.TempDir(), "template-edge-on.yaml")
	if err := os.WriteFile(path, withEdgeOn(t), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lint, path).CombinedOutput()
	if err != nil {
		t.Fatalf("cfn-lint with the edge on: %v\n%s", err, out)
	}
}

// Behind the edge the relay's default behaviour forwards what the managed
// AllViewer policy did (every viewer header, the query, the cookies, the
// Host the origin routes by) and CloudFront-Viewer-Address, which
// CloudFront generates and AllViewer does not forward: the pairing
// throttle counts per viewer by it (internal/relay/caller.go).
func TestTheEdgeForwardsTheViewerAddressToTheRelay(t *testing.T) {
	p := parseTemplate(t)
	def := at(p.resource(t, "Edge"), "Properties", "DistributionConfig", "DefaultCacheBehavior")
	ref := at(def, "OriginRequestPolicyId")
	if ref == nil || ref.Tag != "!Ref" {
		t.Fatalf("the default behaviour's origin request policy is not the template's own: %s", nodeText(ref))
	}
	policy := p.resource(t, ref.Value)
	if at(policy, "Type").Value != "AWS::CloudFront::OriginRequestPolicy" || at(policy, "Condition").Value != "HasEdge" {
		t.Fatalf("%s is not an origin request policy made with the edge", ref.Value)
	}
	cfg := at(policy, "Properties", "OriginRequestPolicyConfig")
	if at(cfg, "HeadersConfig", "HeaderBehavior").Value != "allViewerAndWhitelistCloudFront" {
		t.Fatalf("%s does not forward every viewer header and CloudFront's", ref.Value)
	}
	var headers []string
	for _, h := range at(cfg, "HeadersConfig", "Headers").Content {
		headers = append(headers, h.Value)
	}
	if !slices.Equal(headers, []string{relay.ViewerAddressHeader}) {
		t.Fatalf("%s adds %q, want %s alone", ref.Value, headers, relay.ViewerAddressHeader)
	}
	if at(cfg, "QueryStringsConfig", "QueryStringBehavior").Value != "all" || at(cfg, "CookiesConfig", "CookieBehavior").Value != "all" {
		t.Fatalf("%s drops query strings or cookies AllViewer forwarded", ref.Value)
	}
}
