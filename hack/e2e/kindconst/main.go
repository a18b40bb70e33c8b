// Command kindconst prints the value of a string constant declared in Go
// source files:
//
//	kindconst NAME FILE...
//
// build-images.sh uses it for kind's default CNI and storage manifests, which
// kind keeps as constants of sigs.k8s.io/kind/pkg/build/nodeimage
// (const_cni.go, const_storage.go) built from other constants (the image
// names). Evaluating them, as the compiler does, gives the node image the
// same text kind's own node-image build writes.
//
// The files are type-checked together as one package; they may import the
// standard library only, as those two do not import anything.
package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: kindconst NAME FILE...")
		os.Exit(2)
	}
	v, err := stringConst(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kindconst:", err)
		os.Exit(1)
	}
	fmt.Print(v)
}

// stringConst is the value of the string constant name declared in files.
func stringConst(name string, files []string) (string, error) {
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return "", fmt.Errorf("parsing %s: %w", f, err)
		}
		parsed = append(parsed, af)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check(parsed[0].Name.Name, fset, parsed, nil)
	if err != nil {
		return "", fmt.Errorf("type-checking %v: %w", files, err)
	}
	c, ok := pkg.Scope().Lookup(name).(*types.Const)
	if !ok {
		return "", fmt.Errorf("no constant %s in %v", name, files)
	}
	if c.Val().Kind() != constant.String {
		return "", fmt.Errorf("constant %s in %v is not a string but %s", name, files, c.Val().Kind())
	}
	return constant.StringVal(c.Val()), nil
}
