package natsx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSubjectsAreSpelledOnlyHere walks the workspace's code (tests aside) and fails on any
// string constant outside this package that starts with a subject prefix of the mesh:
// subjects are built by this package's functions, so their layout lives in one place.
func TestSubjectsAreSpelledOnlyHere(t *testing.T) {
	root := workspaceRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case path == self, d.Name() == "gen", d.Name() == "node_modules", strings.HasPrefix(d.Name(), ".") && path != root:
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, p := range SubjectPrefixes() {
				if strings.HasPrefix(s, p) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s: the subject %q is spelled outside natsx; build it with a natsx function", rel, s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d files of %s: not the workspace", files, root)
	}
}

// workspaceRoot is the directory of go.work above this package.
func workspaceRoot(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above", dir)
		}
		dir = parent
	}
}
