package dbserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTier(t *testing.T) {
	mod := t.TempDir()
	for _, d := range []string{"lease", "integration/dbtest", "integrationx"} {
		if err := os.MkdirAll(filepath.Join(mod, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir, tier, require string
		want                     string // "" allowed, "outside", or "error"
	}{
		{"integration package", "integration", "", "", ""},
		{"integration subpackage", "integration/dbtest", "", "", ""},
		{"unit package", "lease", "", "", "outside"},
		{"module root", ".", "", "", "outside"},
		{"a name that only starts like integration", "integrationx", "", "", "outside"},
		{"unit package, tier all", "lease", "all", "", ""},
		{"unit package, a server required", "lease", "", "1", ""},
		{"tier unit, integration package", "integration", "unit", "", "outside"},
		{"tier unit beats a required server", "integration", "unit", "1", "outside"},
		{"unknown tier", "integration", "fast", "", "error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(filepath.Join(mod, tc.dir))
			t.Setenv(EnvTier, tc.tier)
			t.Setenv(envRequire, tc.require)
			err := checkTier()
			switch tc.want {
			case "":
				if err != nil {
					t.Fatalf("checkTier() = %v, want no error", err)
				}
			case "outside":
				if !errors.Is(err, ErrOutsideTier) {
					t.Fatalf("checkTier() = %v, want ErrOutsideTier", err)
				}
			case "error":
				if err == nil || errors.Is(err, ErrOutsideTier) {
					t.Fatalf("checkTier() = %v, want a configuration error", err)
				}
			}
		})
	}
	t.Run("outside a module", func(t *testing.T) {
		t.Chdir(t.TempDir())
		t.Setenv(EnvTier, "")
		t.Setenv(envRequire, "")
		if err := checkTier(); !errors.Is(err, ErrOutsideTier) {
			t.Fatalf("checkTier() = %v, want ErrOutsideTier", err)
		}
	})
}

// Every way the harness gets a server obeys the tier: none of them starts
// a process or dials with FENCEPROXY_TEST_TIER=unit.
func TestTierUnitStartsNothing(t *testing.T) {
	t.Setenv(EnvTier, "unit")
	ctx := context.Background()
	starts := map[string]func() (any, error){
		"Start":       func() (any, error) { return Start(ctx, Options{}) },
		"StartGalera": func() (any, error) { return StartGalera(ctx, ClusterOptions{}) },
		"StartTiDB":   func() (any, error) { return StartTiDB(ctx) },
		"FromDSN":     func() (any, error) { return FromDSN("root@tcp(127.0.0.1:1)/") },
	}
	for name, start := range starts {
		srv, err := start()
		if !errors.Is(err, ErrOutsideTier) || !strings.Contains(err.Error(), EnvTier+"=unit") {
			t.Errorf("%s: %v, %v; want ErrOutsideTier naming %s=unit", name, srv, err, EnvTier)
		}
	}
}
