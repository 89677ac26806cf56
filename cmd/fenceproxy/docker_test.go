package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Docker is not available where the tests run, so the image is not built.
// TestDockerBuildContext checks what can be checked without it: the build
// context that .dockerignore leaves builds the binary with the Dockerfile's
// flags, and the binary is static (nothing to load from the distroless image).
func TestDockerBuildContext(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	root := filepath.Join("..", "..")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	const build = "CGO_ENABLED=0 go build -trimpath -buildvcs=false"
	for _, want := range []string{build, "USER 65532:65532", "EXPOSE 6033 9033", "./cmd/fenceproxy"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Fatalf("the Dockerfile lacks %q", want)
		}
	}
	patterns := dockerignore(t, filepath.Join(root, ".dockerignore"))
	files, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	ctx := t.TempDir()
	kept := 0
	for _, f := range strings.Fields(string(files)) {
		if ignored(patterns, f) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		} else if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(ctx, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		kept++
	}
	if ignored(patterns, "cmd/fenceproxy/main.go") || !ignored(patterns, "rewrite/testdata/mysql.golden") || !ignored(patterns, ".git/config") {
		t.Fatal("the .dockerignore matcher is wrong")
	}
	out := filepath.Join(t.TempDir(), "fenceproxy")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X main.version=docker-test", "-o", out, "./cmd/fenceproxy")
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in the docker build context (%d files): %v\n%s", kept, err, msg)
	}
	bin, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := bin.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	v, err := exec.Command(out, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "fenceproxy docker-test ") {
		t.Errorf("fenceproxy version: %q, %v", v, err)
	}
}

func dockerignore(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.HasPrefix(p, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not understood by this test", p)
		}
		patterns = append(patterns, filepath.Clean(p))
	}
	return patterns
}

// ignored applies .dockerignore patterns as Docker does for the patterns
// used: a pattern matches a path or any directory above it; a leading **/
// matches at any depth.
func ignored(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		anyDepth := strings.HasPrefix(p, "**/")
		p = strings.TrimPrefix(p, "**/")
		for i := 1; i <= len(parts); i++ {
			starts := []int{0}
			if anyDepth {
				starts = starts[:0]
				for s := 0; s < i; s++ {
					starts = append(starts, s)
				}
			}
			for _, s := range starts {
				if ok, _ := filepath.Match(p, strings.Join(parts[s:i], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}
