package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestHarness: the shipped binary is built from
// cmd/fenceproxy's non-test files; nothing they import, directly or not,
// may come from integration/ (the harness: Galera, TiDB and certificate
// set-up, test helpers). The demo's throwaway server is internal/mysqld.
func TestBinaryLinksNoTestHarness(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/fenceproxy/fenceproxy/"
	var own []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, module) {
			own = append(own, strings.TrimPrefix(pkg, module))
		}
	}
	if len(own) == 0 {
		t.Fatalf("go list -deps named none of the module's packages:\n%s", out)
	}
	for _, pkg := range own {
		if pkg == "integration" || strings.HasPrefix(pkg, "integration/") {
			t.Errorf("the binary links %s (test harness)", pkg)
		}
	}
	if t.Failed() {
		t.Logf("the module's packages it links: %s", strings.Join(own, " "))
	}
}

// goTool is the go command that runs these tests.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, root := range []string{os.Getenv("GOROOT"), runtime.GOROOT()} {
		if p := filepath.Join(root, "bin", "go"); root != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	t.Skip("no go command on PATH or in GOROOT: cannot list the binary's packages")
	return ""
}
