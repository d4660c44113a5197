package byorelay_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/byorelay/byorelay/internal/platform/version"
)

// A release has one name. The version is written in internal/platform/version;
// the binaries print it and the functions log it. Both templates'
// Serverless Application Repository metadata publish it, and CHANGELOG.md's
// newest version heading describes it. If any of them drifted, a deployer
// would install one version, read the notes of another and see a third in
// the logs.

// sarApp is the template metadata `sam publish` reads.
type sarApp struct {
	Name            string   `yaml:"Name"`
	Description     string   `yaml:"Description"`
	Author          string   `yaml:"Author"`
	SpdxLicenseID   string   `yaml:"SpdxLicenseId"`
	LicenseURL      string   `yaml:"LicenseUrl"`
	ReadmeURL       string   `yaml:"ReadmeUrl"`
	Labels          []string `yaml:"Labels"`
	HomePageURL     string   `yaml:"HomePageUrl"`
	SemanticVersion string   `yaml:"SemanticVersion"`
	SourceCodeURL   string   `yaml:"SourceCodeUrl"`
}

// The Serverless Application Repository's own rules for these fields,
// which cfn-lint does not check: a publish that breaks one is refused.
var (
	sarName    = regexp.MustCompile(`^[a-zA-Z0-9-]{1,140}$`)
	sarAuthor  = regexp.MustCompile(`^[a-z0-9]([a-z0-9]|-[a-z0-9])*$`)
	sarLabel   = regexp.MustCompile(`^[a-zA-Z0-9+\-_:/@]{1,127}$`)
	semver     = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)\.([0-9]+)$`)
	versionHdr = regexp.MustCompile(`^## \[(v[0-9]+\.[0-9]+\.[0-9]+)\] - ([0-9]{4}-[0-9]{2}-[0-9]{2})$`)
)

// moduleURL is where the module path says the source lives.
const moduleURL = "https://github.com/byorelay/byorelay"

func TestVersionIsSemantic(t *testing.T) {
	if !semver.MatchString(version.Version) {
		t.Fatalf("version.Version %q is not vMAJOR.MINOR.PATCH", version.Version)
	}
}

func TestTemplatesPublishTheVersion(t *testing.T) {
	want := strings.TrimPrefix(version.Version, "v")
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for file, name := range map[string]string{"template.yaml": "byorelay", "site-template.yaml": "byorelay-site"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Metadata struct {
				App sarApp `yaml:"AWS::ServerlessRepo::Application"`
			} `yaml:"Metadata"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		app := doc.Metadata.App
		if app.SemanticVersion != want {
			t.Errorf("%s: SemanticVersion %q, want %q (internal/platform/version)", file, app.SemanticVersion, want)
		}
		if app.Name != name || !sarName.MatchString(app.Name) {
			t.Errorf("%s: Name %q, want %q", file, app.Name, name)
		}
		if n := len(app.Description); n == 0 || n > 256 {
			t.Errorf("%s: Description is %d characters; the repository takes 1 to 256", file, n)
		}
		if len(app.Author) > 127 || !sarAuthor.MatchString(app.Author) {
			t.Errorf("%s: Author %q: lower case letters, digits and single hyphens", file, app.Author)
		}
		if len(app.Labels) == 0 || len(app.Labels) > 10 {
			t.Errorf("%s: %d Labels; the repository takes 1 to 10", file, len(app.Labels))
		}
		for _, l := range app.Labels {
			if !sarLabel.MatchString(l) {
				t.Errorf("%s: label %q is not one the repository takes", file, l)
			}
		}
		// The license the metadata declares is the one LICENSE grants.
		if app.SpdxLicenseID != "MIT" || !strings.HasPrefix(string(license), "MIT License\n") {
			t.Errorf("%s: SpdxLicenseId %q; LICENSE begins %q", file, app.SpdxLicenseID, strings.SplitN(string(license), "\n", 2)[0])
		}
		// sam package uploads these files, named relative to the template.
		for _, f := range []string{app.LicenseURL, app.ReadmeURL} {
			if _, err := os.Stat(f); err != nil || f == "" {
				t.Errorf("%s: %q is not a file of the repository: %v", file, f, err)
			}
		}
		if app.SourceCodeURL != moduleURL || app.HomePageURL != moduleURL {
			t.Errorf("%s: SourceCodeUrl %q, HomePageUrl %q, want %s (the module path)", file, app.SourceCodeURL, app.HomePageURL, moduleURL)
		}
	}
}

// CHANGELOG.md opens with [Unreleased], then the newest version, which is
// this one. Every other second-level heading is a version: an entry is a
// ### heading under one of them, so no entry floats outside a release.
func TestChangelogNamesTheVersion(t *testing.T) {
	f, err := os.Open("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var heads []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "## ") {
			heads = append(heads, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(heads) < 2 || heads[0] != "## [Unreleased]" {
		t.Fatalf("CHANGELOG.md's first headings %q: want ## [Unreleased], then the newest version", heads)
	}
	m := versionHdr.FindStringSubmatch(heads[1])
	if m == nil || m[1] != version.Version {
		t.Fatalf("CHANGELOG.md's newest version heading %q: want \"## [%s] - YYYY-MM-DD\" (internal/platform/version)", heads[1], version.Version)
	}
	for _, h := range heads[2:] {
		if !versionHdr.MatchString(h) {
			t.Errorf("CHANGELOG.md heading %q is neither a version nor [Unreleased]: an entry is a ### heading under ## [Unreleased]", h)
		}
	}
}

// cfn-lint passes both templates as they stand, metadata and all.
func TestTemplatesPassCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cfn-lint is missing under CI")
		}
		t.Skip("cfn-lint is not installed (pip install cfn-lint)")
	}
	out, err := exec.Command(lint, "template.yaml", "site-template.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("cfn-lint: %v\n%s", err, out)
	}
}
