package proxy

import (
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
)

var adminTLSSeq atomic.Uint64

// OpenAdminDB opens a small pool on the proxy's own backend account
// (backend.user), with the same TLS settings as client connections. It
// returns nil, nil when no account is configured.
func OpenAdminDB(b policy.Backend) (*sql.DB, error) {
	if b.User == "" {
		return nil, nil
	}
	tlsCfg, err := backendTLSConfig(b)
	if err != nil {
		return nil, err
	}
	return openAdminDB(b, tlsCfg)
}

// openAdminDB is OpenAdminDB with the backend hop's TLS configuration
// (the proxy's, whose certificates a reload replaces).
func openAdminDB(b policy.Backend, tlsCfg *tls.Config) (*sql.DB, error) {
	if b.User == "" {
		return nil, nil
	}
	conn, err := adminConnector(b, tlsCfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// adminConnector makes sessions of the proxy's own account (backend.user)
// with the backend hop's TLS configuration: the pool's, and the health
// check's fresh logins.
func adminConnector(b policy.Backend, tlsCfg *tls.Config) (driver.Connector, error) {
	pw, err := b.Password()
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = b.User, pw, "tcp", b.Address
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 30*time.Second, 30*time.Second
	// UTC sessions: the audit writer sends record times as UTC text, and
	// lease times compared in a zone with daylight saving repeat an hour.
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	if tlsCfg != nil {
		name := fmt.Sprintf("fenceproxy-admin-%d", adminTLSSeq.Add(1))
		if err := mysql.RegisterTLSConfig(name, tlsCfg); err != nil {
			return nil, err
		}
		cfg.TLSConfig = name
	}
	return mysql.NewConnector(cfg)
}
