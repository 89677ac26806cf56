package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// TestEngineMismatchRefused: backend.engine names the fence's shape. Set
// to mariadb (or mysql) in front of a Galera node, the proxy fenced with
// a share lock that a takeover on another node does not wait for (the
// control of TestGaleraGuardTriggersRace: 94-350 stale commits per run),
// and check-config --connect and serve said nothing. The start-up check
// (proxy.CheckSchema: check-config --connect, serve, reload) now compares
// the setting with the server; a shape that is safe there (galera on any
// InnoDB server, auto) passes.
func TestEngineMismatchRefused(t *testing.T) {
	type server struct {
		name string
		srv  func(t *testing.T) *dbserver.Server
	}
	servers := []server{
		{"mariadb", func(t *testing.T) *dbserver.Server { return dbtest.Shared(t) }},
		{"galera", func(t *testing.T) *dbserver.Server { return dbtest.SharedGalera(t).Nodes[0] }},
		{"tidb", func(t *testing.T) *dbserver.Server { return dbtest.SharedTiDB(t) }},
	}
	// refused[server] = the settings the check must refuse there.
	refused := map[string][]string{
		"mariadb": {policy.EngineMySQL, policy.EngineTiDB},
		"galera":  {policy.EngineMariaDB, policy.EngineMySQL, policy.EngineTiDB},
		"tidb":    {policy.EngineMariaDB, policy.EngineMySQL, policy.EngineGalera},
	}
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			s := sv.srv(t)
			db := dbtest.NewDatabase(t, s)
			root := dbtest.Open(t, s.RootDSN(db))
			mustExec(t, root, "CREATE TABLE items (id INT PRIMARY KEY)")
			if err := lease.CreateSchema(context.Background(), root, db+"."+lease.DefaultTable); err != nil {
				t.Fatal(err)
			}
			backend := proxyAccount(t, s, db)
			for _, eng := range []string{policy.EngineAuto, policy.EngineMariaDB, policy.EngineGalera, policy.EngineMySQL, policy.EngineTiDB} {
				yml := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + s.Addr + "\n  engine: " + eng + "\n  " +
					strings.Join(backend, "\n  ") + "\ntables:\n  - name: " + db + ".items\n"
				cfg, err := policy.Parse("engine.yaml", []byte(yml))
				if err != nil {
					t.Fatal(err)
				}
				adb, err := proxy.OpenAdminDB(cfg.Backend)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				rep, err := proxy.CheckSchema(ctx, adb, cfg)
				cancel()
				adb.Close()
				if err != nil {
					t.Fatal(err)
				}
				var msg string
				for _, e := range rep.Errors {
					if strings.Contains(e.Error(), "backend.engine") {
						msg = e.Error()
					}
				}
				want := false
				for _, r := range refused[sv.name] {
					want = want || r == eng
				}
				switch {
				case want && msg == "":
					t.Errorf("engine: %s in front of %s passed the start-up check (errors: %v)", eng, sv.name, rep.Errors)
				case !want && msg != "":
					t.Errorf("engine: %s in front of %s refused: %s", eng, sv.name, msg)
				case want && !strings.Contains(msg, "engine.yaml:5:"):
					t.Errorf("the refusal does not point at the key: %s", msg)
				default:
					t.Logf("engine: %s: %s", eng, msg)
				}
			}
		})
	}
}
