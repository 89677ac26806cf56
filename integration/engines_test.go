package integration

import (
	"slices"
	"testing"
)

// The engines the fence suite runs against. On Galera the proxy is in front
// of node 1 and other workers take leases over on node 2 (fencedEnv.other);
// on TiDB, in another session of the same tidb-server.
const (
	engMariaDB = "mariadb"
	engGalera  = "galera"
	engTiDB    = "tidb"
)

var allEngines = []string{engMariaDB, engGalera, engTiDB}

// forEachEngine runs f as a subtest per engine, named after it.
func forEachEngine(t *testing.T, f func(t *testing.T, eng string)) {
	t.Helper()
	for _, eng := range allEngines {
		t.Run(eng, func(t *testing.T) { f(t, eng) })
	}
}

// notOn skips the (sub)test on the named engines: a case that cannot apply
// there, for the reason given.
func notOn(t *testing.T, eng, why string, engines ...string) {
	t.Helper()
	if slices.Contains(engines, eng) {
		t.Skipf("not on %s: %s", eng, why)
	}
}
