package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// errorWriters are the functions through which the proxy answers a client
// with an error of its own, and the position of their code argument.
var errorWriters = map[string]int{
	"sendError":         0,
	"SendError":         0, // the fencing layer's (fencing.Responder)
	"writeAuthError":    1,
	"ErrPayload":        0,
	"InitialErrPayload": 0,
}

// TestNoClientRangeErrorCodes: every error code the proxy sends itself is
// a constant outside the client libraries' range (2000-2999): libmariadb
// shows any such code from a server as "2027 Received malformed packet"
// instead of the proxy's message. Codes relayed from the backend (a field
// of a decoded ERR) are the server's and pass. It reads this package and
// the fencing layer's (proxy/fencing).
func TestNoClientRangeErrorCodes(t *testing.T) {
	fset := token.NewFileSet()
	var files []*ast.File
	for dir, pkg := range map[string]string{".": "proxy", "fencing": "fencing"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			n := e.Name()
			if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name.Name == pkg && !strings.Contains(n, "_other") {
				files = append(files, f)
			}
		}
	}
	// The packages' integer constants (the error codes are plain
	// literals: erX = 1053), by package and name.
	consts := map[string]int64{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
							v, _ := strconv.ParseInt(lit.Value, 0, 64)
							consts[f.Name.Name+"."+n.Name] = v
						}
					}
				}
			}
		}
	}
	calls := 0
	for _, f := range files {
		pkg := f.Name.Name
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			i, ok := errorWriters[name]
			if !ok || len(call.Args) <= i {
				return true
			}
			calls++
			var code int64
			switch a := call.Args[i].(type) {
			case *ast.SelectorExpr:
				return true // a code relayed from the backend's own ERR (be.code)
			case *ast.Ident:
				if a.Name == "code" {
					return true // a wrapper passing its parameter on
				}
				v, ok := consts[pkg+"."+a.Name]
				if !ok {
					t.Errorf("%s: %s with code %s, not a constant of the package", fset.Position(call.Pos()), name, a.Name)
					return true
				}
				code = v
			case *ast.BasicLit:
				code, _ = strconv.ParseInt(a.Value, 0, 64)
			default:
				t.Errorf("%s: %s with a code this test cannot read", fset.Position(call.Pos()), name)
				return true
			}
			if code >= 2000 && code < 3000 || clientRange(uint16(code)) {
				t.Errorf("%s: %s sends client-range code %d", fset.Position(call.Pos()), name, code)
			}
			return true
		})
	}
	if calls < 10 {
		t.Fatalf("found only %d calls of the error writers: the check reads nothing", calls)
	}
}
