package confchange

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurity keeps the package pure: its non-test files import only etcd's
// raftpb/quorum/tracker/confchange, protobuf's proto and pure stdlib, read no
// clock and start no goroutine. (CI's "go list -deps" check sees the
// transitive imports of fmt and raftpb too; this one sees what we write.)
func TestPurity(t *testing.T) {
	allowed := map[string]bool{
		"go.etcd.io/raft/v3/raftpb": true, "go.etcd.io/raft/v3/quorum": true,
		"go.etcd.io/raft/v3/tracker": true, "go.etcd.io/raft/v3/confchange": true,
		"google.golang.org/protobuf/proto": true,
		"encoding/binary":                  true, "errors": true, "fmt": true, "maps": true, "slices": true,
		"strconv": true, "strings": true, "time": true, "cmp": true, "sort": true, "math": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		n++
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: goroutine at %s", name, fset.Position(x.Pos()))
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "time" {
					switch x.Sel.Name {
					case "Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc":
						t.Errorf("%s: time.%s at %s: time comes in as an argument", name, x.Sel.Name, fset.Position(x.Pos()))
					}
				}
			}
			return true
		})
	}
	if n < 5 {
		t.Fatalf("found only %d source files", n)
	}
}
