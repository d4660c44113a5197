package byorelay_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A room a newcomer can hold in their head: no source file over
// maxFileLines, and no production function over maxFuncLines outside the
// commands and the bench (whose flag tables and reports read top to
// bottom). Past them a file holds several concerns and a function several
// steps, and the reader has to find the seams the code did not draw.
const (
	maxFileLines = 600
	maxFuncLines = 80
)

func TestNoRoomIsTooBigToHoldInYourHead(t *testing.T) {
	fs := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case ".git", ".cache", "bin", filepath.Join("localtest", "js"):
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if n := strings.Count(string(src), "\n"); n > maxFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by concern", path, n, maxFileLines)
		}
		slash := filepath.ToSlash(path)
		if strings.HasPrefix(slash, "cmd/") || strings.HasPrefix(slash, "internal/bench/") {
			return nil
		}
		f, err := parser.ParseFile(fs, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fs.Position(fn.End()).Line - fs.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d: name its steps", path, fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files: the walk missed the tree", checked)
	}
}
