package mysqld

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hideServers makes Find look where no server is: an empty PATH and no
// search directories, until the test ends.
func hideServers(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := SearchDirs
	SearchDirs = []string{t.TempDir()}
	t.Cleanup(func() { SearchDirs = saved })
}

func TestFindNamesWhatToInstall(t *testing.T) {
	hideServers(t)
	_, err := Find()
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install mariadb-server") {
		t.Fatalf("Find() error = %v", err)
	}
}

// The demo tells "install a server" from any other failure by ErrNotFound.
func TestStartWithoutServerIsErrNotFound(t *testing.T) {
	hideServers(t)
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "fp-dbserver-*"))
	s, err := Start(context.Background(), Options{})
	if !errors.Is(err, ErrNotFound) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start() error = %v, want ErrNotFound", err)
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "fp-dbserver-*"))
	if len(after) > len(before) {
		t.Errorf("Start left a temp dir behind: %v", after)
	}
}

func TestFindPrefersPathThenSearchDirs(t *testing.T) {
	bin, dirs := t.TempDir(), t.TempDir()
	t.Setenv("PATH", bin)
	saved := SearchDirs
	SearchDirs = []string{dirs}
	t.Cleanup(func() { SearchDirs = saved })
	for _, p := range []string{filepath.Join(dirs, "mariadbd"), filepath.Join(bin, "mysqld")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// mariadbd is preferred even when only a search directory has it.
	if got, err := Find(); err != nil || got != filepath.Join(dirs, "mariadbd") {
		t.Fatalf("Find() = %q, %v", got, err)
	}
	os.Remove(filepath.Join(dirs, "mariadbd"))
	if got, err := Find(); err != nil || got != filepath.Join(bin, "mysqld") {
		t.Fatalf("Find() = %q, %v", got, err)
	}
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("a\nb\nc\nd\n\n"), 0o600)
	if got := Tail(p, 2); got != "c\nd" {
		t.Errorf("Tail 2 = %q", got)
	}
	if got := Tail(p, 10); got != "a\nb\nc\nd" {
		t.Errorf("Tail 10 = %q", got)
	}
}

func TestQuote(t *testing.T) {
	if got := Quote(`it's a \ test`); got != `'it\'s a \\ test'` {
		t.Errorf("Quote = %s", got)
	}
}
