package admincli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
)

// consentsFile writes a fixture of n consents, the last one bad when
// broken is set, and returns its path.
func consentsFile(t *testing.T, n int, broken bool) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"consents":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		owner := fmt.Sprintf("owner-%05d", i)
		if broken && i == n-1 {
			owner = ""
		}
		fmt.Fprintf(&b, `{"owner":%q,"siteId":"site-a","paused":false}`, owner)
	}
	b.WriteString(`],"revoked":[]}`)
	path := filepath.Join(t.TempDir(), "fixture.json")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A file several pages long is checked whole before the first page is
// sent: one bad record at its very end writes nothing. The good file
// lands whole, with progress on stderr, and exports back page by page.
func TestImportChecksTheWholeFileThenSendsItInPages(t *testing.T) {
	s := newStack(t)
	const n = 4500 // three pages
	code, _, errOut := s.run(t, "import", consentsFile(t, n, true))
	if code != 1 || !strings.Contains(errOut, "consents[4499].owner") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("a broken file: exit %d: %s", code, errOut)
	}
	if f := s.projection(t).Fixture(); len(f.Consents) != 0 {
		t.Fatalf("a refused file wrote %d consents", len(f.Consents))
	}

	code, out, errOut := s.run(t, "import", consentsFile(t, n, false))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d records written", n)) || !strings.Contains(errOut, fmt.Sprintf("%d of %d records written", n, n)) {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	exported := s.mustRun(t, "export")
	f, err := projection.Parse([]byte(exported))
	if err != nil {
		t.Fatalf("the export does not parse: %v", err)
	}
	if len(f.Consents) != n || f.Consents[0].Owner != "owner-00000" || f.Consents[n-1].Owner != fmt.Sprintf("owner-%05d", n-1) {
		t.Fatalf("exported %d consents, first %+v", len(f.Consents), f.Consents[0])
	}
	// The export imports back as it is.
	path := filepath.Join(t.TempDir(), "export.json")
	if err := os.WriteFile(path, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, "import", path)
	if again := s.mustRun(t, "export"); again != exported {
		t.Fatal("a re-imported export exports differently")
	}
}

func TestImportRefusesWhatTheAPIRefuses(t *testing.T) {
	s := newStack(t)
	for name, body := range map[string]string{
		"unknown key":   `{"consents":[],"extra":[]}`,
		"no consents":   `{"sites":[]}`,
		"a null":        `{"consents":null}`,
		"unknown field": `{"consents":[{"owner":"a","siteId":"s","paused":false,"x":1}]}`,
		"trailing data": `{"consents":[]} {}`,
		"repeated key":  `{"consents":[],"consents":[]}`,
	} {
		path := filepath.Join(t.TempDir(), "f.json")
		os.WriteFile(path, []byte(body), 0o600)
		if code, _, errOut := s.run(t, "import", path); code != 1 || !strings.Contains(errOut, "nothing was written") {
			t.Errorf("%s: exit %d: %s", name, code, errOut)
		}
	}
}

// Each site of an import also writes its read copies, so the API takes at
// most controlplane.MaxImportPageSites sites a page, and the CLI ends a
// page there: a file of many sites lands whole.
func TestImportSendsAFewSitesAPage(t *testing.T) {
	s := newStack(t)
	f := projection.EmptyFixture()
	const n = 3*controlplane.MaxImportPageSites + 1
	for i := range n {
		f.Sites = append(f.Sites, projection.SiteRecord{SiteID: fmt.Sprintf("site-%02d", i), Site: keys(t).Public()})
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sites.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, "import", path)
	if got := s.projection(t).Fixture(); len(got.Sites) != n {
		t.Fatalf("imported %d sites, want %d", len(got.Sites), n)
	}

	over := projection.EmptyFixture()
	over.Sites = f.Sites[:controlplane.MaxImportPageSites+1]
	_, err = controlplane.NewClient(s.url, nil).ImportPage(t.Context(), controlplane.ImportPageRequest{Import: controlplane.NewImportID(), Fixture: over})
	if err == nil || !strings.Contains(err.Error(), "sites") {
		t.Fatalf("a page of %d sites: %v, want a refusal", len(over.Sites), err)
	}
}
