package byorelay_test

import (
	"bufio"
	"go/parser"
	"go/scanner"
	"go/token"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The docs stand alone: every relative link resolves to a file in the
// repository, the architecture page stays a map short enough to read in
// one sitting, every decision record is linked from it, and no doc or Go
// comment names a note or a source file outside the repository. A link
// that points nowhere sends a newcomer to a dead end; a decision nobody
// links is a decision nobody finds; a comment that cites a file nobody
// here can open states no rule.

// maxArchitectureLines is the most docs/architecture.md may run to.
const maxArchitectureLines = 300

// maxREADMELines is the most README.md may run to: what byorelay is, the
// two commands, a first run, a first deploy and a map of docs/. The
// reference pages live under docs/, where nobody has to scroll past them
// to find the first command.
const maxREADMELines = 250

// outsideNames are the design notes that live outside the repository, and
// the section sign their references use.
var outsideNames = []string{"relay.md", "protocol.md", "site-server.md", "streams.md", "aws-notes.md", "ARCHITECTURE.md", "reference/", "../shared", "§"}

// outsidePattern is what else names something outside the repository: a
// path into the reference packages' TypeScript sources, a bug id, an
// amendment of the protocol's design notes.
var outsidePattern = regexp.MustCompile(`\b[A-Za-z0-9_-]+\.ts\b|\bB[0-9]{3}\b|\bAmendment [A-Z]\b`)

// mdLink is an inline Markdown link or image: [text](target "title").
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode is a code span, whose text is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// docFiles are the Markdown files the docs rule covers.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	err := filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// link is one relative link and the line it is on.
type link struct {
	line   int
	target string
}

// relativeLinks lists the links of a Markdown file that point into the
// repository, outside fenced code blocks and code spans.
func relativeLinks(t *testing.T, path string) []link {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var links []link
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		text = inlineCode.ReplaceAllString(text, "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue // http:, https:, mailto: are not files here
			}
			if strings.HasPrefix(target, "#") {
				continue // a heading in this same file
			}
			links = append(links, link{line: n, target: target})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return links
}

func TestEveryRelativeLinkInTheDocsResolves(t *testing.T) {
	checked := 0
	for _, path := range docFiles(t) {
		for _, l := range relativeLinks(t, path) {
			checked++
			target, _, _ := strings.Cut(l.target, "#")
			target, err := url.PathUnescape(target)
			if err != nil {
				t.Errorf("%s:%d: link %q does not unescape: %v", path, l.line, l.target, err)
				continue
			}
			resolved := filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
			if _, err := os.Stat(resolved); err != nil {
				t.Errorf("%s:%d: link %q points at %s, which is not in the repository", path, l.line, l.target, resolved)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative links at all: the link pattern is broken")
	}
}

func TestTheREADMEIsShortAndMapsEveryPage(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if n := strings.Count(text, "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d", n, maxREADMELines)
	}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range relativeLinks(t, "README.md") {
		target, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(target)] = true
	}
	for _, p := range pages {
		if !linked[p] {
			t.Errorf("README.md does not link %s: a page nobody links is a page nobody reads", p)
		}
	}
}

func TestTheArchitecturePageIsAShortMap(t *testing.T) {
	raw, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if n := strings.Count(text, "\n"); n > maxArchitectureLines {
		t.Errorf("docs/architecture.md has %d lines, more than %d", n, maxArchitectureLines)
	}
	for _, outside := range outsideNames {
		if strings.Contains(text, outside) {
			t.Errorf("docs/architecture.md names %q, which is not in the repository", outside)
		}
	}
}

func TestArchitectureLinksEveryDecisionRecord(t *testing.T) {
	linked := map[string]bool{}
	for _, l := range relativeLinks(t, "docs/architecture.md") {
		target, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(filepath.Join("docs", target))] = true
	}
	records, err := filepath.Glob("docs/decisions/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 {
		t.Fatal("docs/decisions holds no records")
	}
	name := regexp.MustCompile(`^[0-9]{4}-[a-z0-9-]+\.md$`)
	for _, rec := range records {
		if !name.MatchString(filepath.Base(rec)) {
			t.Errorf("%s: a record is named NNNN-short-title.md", rec)
		}
		if !linked[filepath.Clean(rec)] {
			t.Errorf("%s is not linked from docs/architecture.md", rec)
		}
		raw, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(raw), "\n"); n < 10 || n > 40 {
			t.Errorf("%s has %d lines; a record is short, 10 to 40", rec, n)
		}
		for _, section := range []string{"## Context", "## Decision", "## Consequences"} {
			if !strings.Contains(string(raw), "\n"+section+"\n") {
				t.Errorf("%s has no %q section", rec, section)
			}
		}
	}
}

// sourceFiles lists the repository's files whose names end in suffix,
// leaving out installed packages and hidden directories.
func sourceFiles(t *testing.T, suffix string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, suffix) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// goComments is the text of every comment in a Go file.
func goComments(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(path, -1, len(src)), src, nil, scanner.ScanComments)
	var comments []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return comments
		}
		if tok == token.COMMENT {
			comments = append(comments, lit)
		}
	}
}

func TestDocsAndCommentsNameNothingOutside(t *testing.T) {
	check := func(where, text string) {
		for _, outside := range outsideNames {
			if strings.Contains(text, outside) {
				t.Errorf("%s names %q, which is not in the repository", where, outside)
			}
		}
		for _, m := range outsidePattern.FindAllString(text, -1) {
			t.Errorf("%s names %q, which is not in the repository: state the rule instead", where, m)
		}
	}
	docs := sourceFiles(t, ".md")
	for _, path := range docs {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		check(path, string(raw))
	}
	sources := sourceFiles(t, ".go")
	for _, path := range sources {
		for _, c := range goComments(t, path) {
			check(path+" (a comment)", c)
		}
	}
	scripts := sourceFiles(t, ".mjs")
	for _, path := range scripts {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range scriptComments(string(raw)) {
			check(path+" (a comment)", c)
		}
	}
	if len(docs) == 0 || len(sources) == 0 || len(scripts) == 0 {
		t.Fatal("found no docs, no Go files or no scripts: the walk is broken")
	}
}

// scriptComments are a JavaScript module's comment lines: those that
// start with // and those inside /* */, which is how the repository's
// scripts write them. A comment after code on the same line is not read.
func scriptComments(src string) []string {
	var out []string
	inBlock := false
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case inBlock:
			out = append(out, trimmed)
			inBlock = !strings.Contains(trimmed, "*/")
		case strings.HasPrefix(trimmed, "//"):
			out = append(out, trimmed)
		case strings.HasPrefix(trimmed, "/*"):
			out = append(out, trimmed)
			inBlock = !strings.Contains(trimmed, "*/")
		}
	}
	return out
}

// TestImportBlocksGroupThisModuleApart: every import block is the standard
// library, then third-party modules, then this module, each group apart.
// gofmt sorts a group but never splits one, so a group that mixes them
// stays mixed, and a reader cannot see at a glance what a file takes from
// outside the module.
func TestImportBlocksGroupThisModuleApart(t *testing.T) {
	const module = "github.com/byorelay/byorelay"
	names := []string{"the standard library", "a third-party module", "this module"}
	kind := func(path string) int {
		switch first, _, _ := strings.Cut(path, "/"); {
		case path == module || strings.HasPrefix(path, module+"/"):
			return 2
		case strings.Contains(first, "."):
			return 1
		}
		return 0
	}
	for _, path := range sourceFiles(t, ".go") {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		line := func(p token.Pos) int { return fset.Position(p).Line }
		last, group, seen := 0, -1, -1
		for _, spec := range f.Imports {
			start := line(spec.Pos())
			if spec.Doc != nil {
				start = line(spec.Doc.Pos())
			}
			imp, _ := strconv.Unquote(spec.Path.Value)
			k := kind(imp)
			switch {
			case start > last+1 || group < 0:
				if k < seen {
					t.Errorf("%s: %s is imported in a group after %s", path, imp, names[seen])
				}
				group = k
			case k != group:
				t.Errorf("%s: %s shares an import group with %s", path, imp, names[group])
			}
			seen = max(seen, k)
			last = line(spec.End())
		}
	}
}
