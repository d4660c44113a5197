package byorelay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
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

// maxTestName is the longest a Test, Benchmark or Fuzz function's name may
// be, its prefix included.
const maxTestName = 50

// TestTestNamesAreShort: every test, benchmark and fuzz function in the
// tree, under any build tag, is named in at most maxTestName characters.
// The name is what a person types after -run, reads in a failure and
// copies into the docs; past that length it is retyped wrong, wraps in
// the log and stops being read as the behaviour it names.
func TestTestNamesAreShort(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !isTestFunc(fn.Name.Name) {
				continue
			}
			seen++
			if n := len(fn.Name.Name); n > maxTestName {
				t.Errorf("%s: %s is %d characters, over %d", fset.Position(fn.Pos()), fn.Name.Name, n, maxTestName)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("found no test function: the test would hold nothing")
	}
}

// isTestFunc says whether name is one go test runs: Test, Benchmark or Fuzz
// alone or followed by anything but a lower-case letter.
func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz"} {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return true
		}
		r, _ := utf8.DecodeRuneInString(rest)
		return !unicode.IsLower(r)
	}
	return false
}
