package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sharedRules are the rules of rules.go that every store must decide by.
var sharedRules = []string{"Claimable", "DecideSweep"}

// Both stores decide by the shared rules and keep no copy of their own: each
// calls every rule of rules.go, and neither declares a function of the
// rule's name. A store that judged a candidate its own way would pass the
// shared suite only as long as the two copies happened to agree.
func TestEveryStoreDecidesByTheSharedRules(t *testing.T) {
	for _, dir := range []string{"memory", "dynamo"} {
		calls, declared := map[string]bool{}, map[string]bool{}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fs := token.NewFileSet()
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fs, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && id.Name == "store" {
						calls[n.Sel.Name] = true
					}
				case *ast.FuncDecl:
					declared[strings.ToLower(n.Name.Name)] = true
				}
				return true
			})
		}
		for _, rule := range sharedRules {
			if !calls[rule] {
				t.Errorf("store/%s never calls store.%s", dir, rule)
			}
			if declared[strings.ToLower(rule)] {
				t.Errorf("store/%s declares its own %s: decide by store.%s", dir, strings.ToLower(rule), rule)
			}
		}
	}
}
