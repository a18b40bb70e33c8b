package dataplane

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// facades are the public packages that only re-export an internal
// package's names for programs outside meshctl.
var facades = []string{"hbone", "proxy", "certs"}

// TestFacadesExportWhatBenchUses keeps the facades small: each exports
// exactly the names the bench module (the program outside meshctl that
// they exist for) uses, so a name bench stops using goes with it.
// meshctl's own packages import the internal implementations.
func TestFacadesExportWhatBenchUses(t *testing.T) {
	t.Parallel()
	used := benchUses(t)
	for _, name := range facades {
		exported := exportedNames(t, name)
		want := used[modulePath+"/pkg/dataplane/"+name]
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(exported, want) {
			t.Errorf("pkg/dataplane/%s exports %v; bench uses %v", name, exported, want)
		}
	}
}

const modulePath = "github.com/meshctl/meshctl"

// benchUses returns, per facade import path, the names bench's Go files
// select from it.
func benchUses(t *testing.T) map[string][]string {
	t.Helper()
	paths := map[string]bool{}
	for _, name := range facades {
		paths[modulePath+"/pkg/dataplane/"+name] = true
	}
	used := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("../../bench", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		local := map[string]string{} // name in the file -> import path
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if !paths[ip] {
				continue
			}
			n := path.Base(ip)
			if imp.Name != nil {
				n = imp.Name.Name
			}
			local[n] = ip
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok {
					if ip, ok := local[x.Name]; ok {
						used[ip] = append(used[ip], sel.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if os.IsNotExist(err) {
		t.Skip("no bench module next to this one")
	}
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// exportedNames returns the sorted top-level exported names of the
// facade's non-test files.
func exportedNames(t *testing.T, name string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(name, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}
