package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDocsCoverEverything: docs/kvserver.md, the server's reference,
// names every flag the binary defines (walked through its -h, which prints
// the whole flag set), every route the mux serves and every error code the
// server can answer (the literals it writes, its refusal table, and every
// code of confchange's refusals).
func TestDocsCoverEverything(t *testing.T) {
	raw, err := os.ReadFile("../../docs/kvserver.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	code, out := runExit(t, "-h")
	if code != 0 {
		t.Fatalf("kvserver -h: exit %d\n%s", code, out)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(out, -1)
	if len(flags) < 20 {
		t.Fatalf("kvserver -h lists %d flags:\n%s", len(flags), out)
	}
	for _, f := range flags {
		if !strings.Contains(doc, "`--"+f[1]) {
			t.Errorf("flag --%s is not in docs/kvserver.md", f[1])
		}
	}

	routes := slices.Clone(kvRoutes)
	routes = append(routes, (&server{}).routeTable()...)
	for _, rt := range routes {
		if !strings.Contains(doc, "`"+rt.pattern) {
			t.Errorf("route %s is not in docs/kvserver.md", rt.pattern)
		}
		for _, q := range rt.known {
			if !strings.Contains(doc, q) {
				t.Errorf("query parameter %s of %s is not in docs/kvserver.md", q, rt.pattern)
			}
		}
	}

	codes := serverCodes(t)
	if len(codes) < 15 {
		t.Fatalf("found only %d codes: %v", len(codes), codes)
	}
	for _, c := range codes {
		if !strings.Contains(doc, "`"+c+"`") {
			t.Errorf("code %s is not in docs/kvserver.md", c)
		}
	}
}

// serverCodes returns every code the server can answer: the string
// literals it passes to writeError, the keys of refusalStatus, and the
// codes of confchange's refusal table (which fail answers through Code).
func serverCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../confchange/errors.go")
	set := map[string]bool{}
	fset := token.NewFileSet()
	lit := func(e ast.Expr) {
		if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if s, err := strconv.Unquote(bl.Value); err == nil {
				set[s] = true
			}
		}
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "writeError" && len(n.Args) >= 3 {
					lit(n.Args[2])
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if (id.Name != "refusalStatus" && id.Name != "codes") || i >= len(n.Values) {
						continue
					}
					cl, ok := n.Values[i].(*ast.CompositeLit)
					if !ok {
						continue
					}
					for _, e := range cl.Elts {
						switch e := e.(type) {
						case *ast.KeyValueExpr: // refusalStatus: "code": status
							lit(e.Key)
						case *ast.CompositeLit: // confchange's codes: {ErrX, "code"}
							if len(e.Elts) == 2 {
								lit(e.Elts[1])
							}
						}
					}
				}
			}
			return true
		})
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
