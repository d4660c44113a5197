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
	relayOnly := []string{"internal/relay", "internal/lambdafn", "internal/controlplane", "store"}
	siteOnly := []string{"internal/sitefn", "internal/sitepump", "internal/siteserver", "internal/sitestore"}
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

// layers places every package of the module, lowest first. A package
// imports only from a layer below its own, or from inside its own entry
// (store/dynamo is its own entry, so it may import store below it, but
// internal/platform/ddb may import internal/platform/clock beside it). Two
// entries in one layer never import each other: the relay and the control
// plane are two planes, the relay's store and the site's store two stacks,
// the daemon and the site two clients. The top is tooling and wiring
// (functions, commands, the bench, the local stack, examples, the fitness
// tests): it may import anything, and nothing below imports it.
var layers = [][]string{
	{"protocol"},
	{"internal/platform", "internal/stream", "internal/repo"},
	{"store", "internal/sitestore", "client/site", "client/daemon"},
	{"store/memory", "store/dynamo", "store/storetest", "internal/projection",
		"internal/sitestore/memory", "internal/sitestore/dynamo", "internal/sitestore/sitestoretest", "internal/siteserver"},
	{"internal/grant", "internal/sitepump"},
	{"internal/relay", "internal/controlplane"},
	{"internal/lambdafn", "internal/sitefn"},
}

// top is the tooling and wiring above every layer.
var top = []string{"", "functions", "cmd", "internal/bench", "localtest", "examples"}

// placed is the entry of layers (or top) that holds pkg, a module-relative
// path, and its layer (len(layers) for top); ok is false for a package no
// entry holds. The longest entry that is pkg or a parent of it wins.
func placed(pkg string) (entry string, layer int, ok bool) {
	holds := func(e string) bool { return pkg == e || e == "" || strings.HasPrefix(pkg, e+"/") }
	for i, l := range append(layers, top) {
		for _, e := range l {
			if holds(e) && (!ok || len(e) > len(entry)) && (e != "" || pkg == "") {
				entry, layer, ok = e, i, true
			}
		}
	}
	return entry, layer, ok
}

// TestImportsPointDown: every package's imports (tests' aside) point down
// the layers above, and two named rules hold whatever the layers say: no
// package of the site stack imports the relay's store (a site function
// would carry the relay's store into every cold start, and a change to one
// stack's ids or bounds could break the other), and the public daemon
// library does not import the public site SDK (a device would link a
// site's whole client to read two plaintext types).
func TestImportsPointDown(t *testing.T) {
	const mod = "github.com/byorelay/byorelay"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) (string, bool) {
		if p == mod {
			return "", true
		}
		r, found := strings.CutPrefix(p, mod+"/")
		return r, found
	}
	never := []struct{ from, to, why string }{
		{"internal/sitestore", "store", "the site stack imports the relay's store"},
		{"internal/siteserver", "store", "the site stack imports the relay's store"},
		{"internal/sitefn", "store", "the site stack imports the relay's store"},
		{"internal/sitepump", "store", "the site stack imports the relay's store"},
		{"client/site", "store", "the site stack imports the relay's store"},
		{"client/daemon", "client/site", "the daemon library imports the site SDK"},
	}
	under := func(p, e string) bool { return p == e || strings.HasPrefix(p, e+"/") }
	edges := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, _ := rel(fields[0])
		entry, layer, ok := placed(pkg)
		if !ok {
			t.Errorf("%s is in no layer: place it in stacks_test.go's layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, inModule := rel(imp)
			if !inModule {
				continue
			}
			edges++
			for _, n := range never {
				if under(pkg, n.from) && under(dep, n.to) {
					t.Errorf("%s imports %s: %s", pkg, dep, n.why)
				}
			}
			depEntry, depLayer, ok := placed(dep)
			if !ok || layer == len(layers) || depEntry == entry || depLayer < layer {
				continue
			}
			t.Errorf("%s (%s, layer %d) imports %s (%s, layer %d): imports point down", pkg, entry, layer, dep, depEntry, depLayer)
		}
	}
	if edges == 0 {
		t.Fatal("go list named no import inside the module: the test would hold nothing")
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
