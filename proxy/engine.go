package proxy

import (
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// learnEngine settles which engine the backend connection talks to, which
// picks the fence shape: backend.engine when it names one, else the
// handshake's version string and, for MariaDB and MySQL, whether wsrep
// (Galera) is on. A Galera node's version string does not say so.
//
// It asks on every new backend connection rather than once per address, so
// that a backend that becomes a Galera node, or an address that now leads
// to one, is fenced right at once. It asks with SELECT @@wsrep_on: measured
// on MariaDB 10.11 (server CPU per connect, auth, SELECT 1, quit), the
// connection alone cost the server 93-113 us, with SELECT @@wsrep_on
// 106-153 us, with SHOW VARIABLES LIKE 'wsrep_on' 586-730 us (it builds the
// whole variable list to filter it), which made that probe the largest
// cost of a connection through the proxy. A server without the variable
// (MySQL, MariaDB built without wsrep: neither can be a Galera node)
// answers ERR 1193; the proxy then asks SHOW VARIABLES, which returns no row
// and leaves the session's diagnostics area empty again (measured: SHOW
// WARNINGS, @@error_count and FOUND_ROWS() as after SHOW VARIABLES alone),
// and keeps asking that way on later connections. If the probe fails
// otherwise, the connection is treated as Galera: that shape is safe on
// every InnoDB engine, the others are not safe on Galera.
//
// The probe is pipelined: sendEngineProbe sends it as soon as the backend
// accepted the login (the client has its OK already), and finishEngineProbe
// reads its answer when the client's first command arrives, or before the
// proxy starts watching the idle backend: the server runs the same
// statements in the same order as when the proxy waited for the answer,
// and the proxy does not wait on the backend between the login and the
// first command.
func (c *clientConn) learnEngine(rt *runtime) error {
	if err := c.sendEngineProbe(rt); err != nil {
		return err
	}
	return c.finishEngineProbe()
}

// Engine probes a connection can have in flight (clientConn.probe).
const (
	probeNone     = iota
	probeWsrepVar // SELECT @@wsrep_on
	probeShowVars // SHOW VARIABLES LIKE 'wsrep_on'
)

const (
	probeWsrepSQL = "SELECT @@wsrep_on"
	probeShowSQL  = "SHOW VARIABLES LIKE 'wsrep_on'"
)

// sendEngineProbe settles the engine from the configuration or the
// handshake, or sends the probe whose answer finishEngineProbe reads.
func (c *clientConn) sendEngineProbe(rt *runtime) error {
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
	c.probe, c.probeTimeout = probeWsrepVar, rt.cfg.Timeouts.Handshake.D()
	sql := probeWsrepSQL
	if c.p.noWsrepVar.Load() {
		c.probe, sql = probeShowVars, probeShowSQL
	}
	if err := c.queueOwn(sql); err != nil {
		return err
	}
	return c.backend.Flush()
}

// finishEngineProbe reads the answer to the probe in flight, if any, and
// clears the backend's read deadline. It reads under the handshake's
// deadline (probeDeadline, the backend's read deadline since the
// handshake), or, when the client sent nothing until that passed, under
// timeouts.handshake from now: a deadline in the past fails the read at
// once, even of an answer that has been waiting.
func (c *clientConn) finishEngineProbe() error {
	if c.probe == probeNone {
		return nil
	}
	probe := c.probe
	c.probe = probeNone
	if now := time.Now(); !now.Before(c.probeDeadline) && c.probeTimeout > 0 {
		c.backend.SetReadDeadline(now.Add(c.probeTimeout))
	}
	defer c.backend.SetReadDeadline(time.Time{})
	if probe == probeWsrepVar {
		rows, err := c.readOwn()
		if err == nil {
			c.srv.Galera = len(rows) == 1 && len(rows[0]) == 1 && isOn(rows[0][0])
			return nil
		}
		be, ok := err.(*wire.ServerError)
		if !ok {
			return err
		}
		if be.Code != erUnknownSystemVariable {
			return c.probeFailed(err)
		}
		c.p.noWsrepVar.Store(true)
		if err := c.queueOwn(probeShowSQL); err != nil {
			return err
		}
		if err := c.backend.Flush(); err != nil {
			return err
		}
	}
	rows, err := c.readOwn()
	if err != nil {
		if _, ok := err.(*wire.ServerError); !ok {
			return err
		}
		return c.probeFailed(err)
	}
	for _, r := range rows {
		if len(r) == 2 && strings.EqualFold(r[0].S, "wsrep_on") && isOn(r[1]) {
			c.srv.Galera = true
		}
	}
	return nil
}

// erUnknownSystemVariable is ER_UNKNOWN_SYSTEM_VARIABLE.
const erUnknownSystemVariable = 1193

// isOn reads a boolean variable's value: 1 from SELECT @@var, ON from SHOW
// VARIABLES.
func isOn(v wire.Value) bool {
	return !v.Null && (v.S == "1" || strings.EqualFold(v.S, "ON"))
}

func (c *clientConn) probeFailed(err error) error {
	c.log().Warn("could not learn whether the backend is a Galera node; fencing as on Galera", "err", err)
	c.srv.Galera = true
	return nil
}
