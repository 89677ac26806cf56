package dbserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The test tiers. Unit tests need no database server; integration tests
// get theirs from this package (through integration/dbtest). Which tier a
// test binary is in follows from its package's directory, which go test
// makes the binary's working directory: packages under integration/ are
// the integration tier; every other package is a unit package, whose few
// tests that need a server are integration-tier tests too and run only
// when asked for. So no unit package starts a server by surprise, whoever
// adds a test to it.
const (
	// EnvTier chooses the tier: "unit" starts and connects to no server
	// at all (FENCEPROXY_TEST_DSN included), so every test that needs
	// one is skipped; "all" runs every such test, those in unit packages
	// too. Unset: servers for integration/ packages only, as far as the
	// binaries are installed.
	EnvTier = "FENCEPROXY_TEST_TIER"
	// envRequire ("1": a missing server fails instead of skipping, as in
	// make test and CI) implies EnvTier=all.
	envRequire = "FENCEPROXY_REQUIRE_SERVER"
)

// ErrOutsideTier is returned (wrapped) by Start, StartGalera, StartTiDB
// and FromDSN when the tier being run has no servers. Test helpers skip
// on it.
var ErrOutsideTier = errors.New("integration-tier test: no database server in this tier")

// checkTier tells whether this process may start or connect to a server.
func checkTier() error {
	switch tier := os.Getenv(EnvTier); tier {
	case "unit":
		return fmt.Errorf("%w: %s=unit (make unit)", ErrOutsideTier, EnvTier)
	case "all":
		return nil
	case "":
		if os.Getenv(envRequire) == "1" {
			return nil
		}
		dir, ok := packageDir()
		if ok && (dir == "integration" || strings.HasPrefix(dir, "integration/")) {
			return nil
		}
		return fmt.Errorf("%w: %s is a unit package; its tests that need a server run with %s=all or %s=1 (make test does)",
			ErrOutsideTier, dir, EnvTier, envRequire)
	default:
		return fmt.Errorf("dbserver: %s=%q: want unit or all", EnvTier, tier)
	}
}

// packageDir is the test binary's package as a slash path from the
// module root: go test runs a test binary in its package's directory. ok
// is false outside a module (the binary was run elsewhere by hand): then
// the package counts as a unit package.
func packageDir() (dir string, ok bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "(unknown directory)", false
	}
	for root := wd; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, wd)
			if err != nil {
				return wd, false
			}
			return filepath.ToSlash(rel), true
		}
		parent := filepath.Dir(root)
		if parent == root {
			return wd, false
		}
		root = parent
	}
}
