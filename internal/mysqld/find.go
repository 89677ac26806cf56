package mysqld

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// ErrNotFound is returned (wrapped) by Find and Start when no server binary
// is installed.
var ErrNotFound = errors.New("no MariaDB or MySQL server binary found")

// SearchDirs are looked at after PATH: Debian puts mariadbd in /usr/sbin,
// which is often not on a non-root PATH; MySQL tarballs live in
// /usr/local/mysql.
var SearchDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"}

// Binary is a server binary and what its --version says.
type Binary struct {
	Path                string
	Flavor              string // FlavorMariaDB or FlavorMySQL
	Major, Minor, Patch int
}

// Find returns the path of mariadbd or mysqld (mariadbd preferred).
func Find() (string, error) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		for _, dir := range SearchDirs {
			p := filepath.Join(dir, name)
			if IsExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w (looked for mariadbd and mysqld on PATH and in %s): install one, e.g. `apt-get install mariadb-server`, or point FENCEPROXY_TEST_DSN at a running server",
		ErrNotFound, strings.Join(SearchDirs, ", "))
}

// IsExecutable tells whether p is a regular file someone may execute.
func IsExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

var versionRE = regexp.MustCompile(`Ver\s+(\d+)\.(\d+)\.(\d+)`)

// Inspect runs `path --version` and says which server it is.
func Inspect(path string) (Binary, error) {
	out, err := exec.Command(path, "--no-defaults", "--version").CombinedOutput()
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %v: %s", path, err, strings.TrimSpace(string(out)))
	}
	b := Binary{Path: path, Flavor: FlavorMySQL}
	// mysqld may be MariaDB's compatibility name: trust the output, not the name.
	if strings.Contains(string(out), "MariaDB") {
		b.Flavor = FlavorMariaDB
	}
	if m := versionRE.FindStringSubmatch(string(out)); m != nil {
		b.Major, _ = strconv.Atoi(m[1])
		b.Minor, _ = strconv.Atoi(m[2])
		b.Patch, _ = strconv.Atoi(m[3])
	}
	return b, nil
}

// findInstallDB returns mariadb-install-db (or the older mysql_install_db)
// belonging to a MariaDB server binary.
func findInstallDB(binary string) (string, error) {
	base := filepath.Dir(filepath.Dir(binary))
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		for _, dir := range []string{filepath.Join(base, "bin"), filepath.Join(base, "scripts"), filepath.Dir(binary)} {
			if p := filepath.Join(dir, name); IsExecutable(p) {
				return p, nil
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: found %s but not mariadb-install-db next to it: install `apt-get install mariadb-server`", ErrNotFound, binary)
}
