package dbserver

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
// is installed. Test helpers skip on it unless a server is required.
var ErrNotFound = errors.New("no MariaDB or MySQL server binary found")

// searchDirs are looked at after PATH: Debian puts mariadbd in /usr/sbin,
// which is often not on a non-root PATH; MySQL tarballs live in /usr/local/mysql.
var searchDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"}

// Find returns the path of mariadbd or mysqld (mariadbd preferred).
func Find() (binary string, err error) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		for _, dir := range searchDirs {
			p := filepath.Join(dir, name)
			if isExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w (looked for mariadbd and mysqld on PATH and in %s): install one, e.g. `apt-get install mariadb-server`, or point FENCEPROXY_TEST_DSN at a running server",
		ErrNotFound, strings.Join(searchDirs, ", "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// binaryInfo is what `BINARY --version` says.
type binaryInfo struct {
	flavor              string // "mariadb" or "mysql"
	major, minor, patch int
}

var versionRE = regexp.MustCompile(`Ver\s+(\d+)\.(\d+)\.(\d+)`)

func inspectBinary(binary string) (binaryInfo, error) {
	out, err := exec.Command(binary, "--no-defaults", "--version").CombinedOutput()
	if err != nil {
		return binaryInfo{}, fmt.Errorf("%s --version: %v: %s", binary, err, strings.TrimSpace(string(out)))
	}
	info := binaryInfo{flavor: FlavorMySQL}
	// mysqld may be MariaDB's compatibility name: trust the output, not the name.
	if strings.Contains(string(out), "MariaDB") {
		info.flavor = FlavorMariaDB
	}
	if m := versionRE.FindStringSubmatch(string(out)); m != nil {
		info.major, _ = strconv.Atoi(m[1])
		info.minor, _ = strconv.Atoi(m[2])
		info.patch, _ = strconv.Atoi(m[3])
	}
	return info, nil
}

// findInstallDB returns mariadb-install-db (or the older mysql_install_db)
// belonging to a MariaDB server binary.
func findInstallDB(binary string) (string, error) {
	base := filepath.Dir(filepath.Dir(binary))
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		for _, dir := range []string{filepath.Join(base, "bin"), filepath.Join(base, "scripts"), filepath.Dir(binary)} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p, nil
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: found %s but not mariadb-install-db next to it: install `apt-get install mariadb-server`", ErrNotFound, binary)
}
