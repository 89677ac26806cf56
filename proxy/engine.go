package proxy

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// learnEngine settles which engine the backend connection talks to, which
// picks the fence shape: backend.engine when it names one, else the
// handshake's version string and, for MariaDB and MySQL, whether wsrep
// (Galera) is on. A Galera node's version string does not say so.
//
// It asks on every new backend connection rather than once per address:
// one SHOW VARIABLES after authentication, a single round trip (measured:
// BenchmarkConnectEngine), and a backend that becomes a Galera node, or an
// address that now leads to one, is fenced right at once. SHOW VARIABLES
// needs no privilege, and on a server without wsrep it returns no row
// instead of an error, so it leaves nothing in the session's diagnostics.
// If it fails, the connection is treated as Galera: that shape is safe on
// every InnoDB engine, the others are not safe on Galera.
func (c *clientConn) learnEngine(rt *runtime) error {
	switch rt.cfg.Backend.Engine {
	case policy.EngineGalera:
		c.srv.Galera = true
		return nil
	case policy.EngineMariaDB:
		c.srv.Flavor, c.srv.Galera = rewrite.MariaDB, false
		return nil
	case policy.EngineMySQL:
		c.srv.Flavor, c.srv.Galera = rewrite.MySQL, false
		return nil
	case policy.EngineTiDB:
		c.srv.Flavor, c.srv.Galera = rewrite.TiDB, false
		return nil
	}
	if c.srv.Flavor == rewrite.TiDB {
		return nil
	}
	rows, err := c.backendQuery("SHOW VARIABLES LIKE 'wsrep_on'")
	if err != nil {
		if _, ok := err.(*backendError); !ok {
			return err
		}
		c.log.Warn("could not learn whether the backend is a Galera node; fencing as on Galera", "err", err)
		c.srv.Galera = true
		return nil
	}
	for _, r := range rows {
		if len(r) == 2 && strings.EqualFold(r[0].s, "wsrep_on") && strings.EqualFold(r[1].s, "ON") {
			c.srv.Galera = true
		}
	}
	return nil
}
