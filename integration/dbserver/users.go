package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// CreateUser (re)creates user@'%' with password, authenticated by plugin, and
// grants it ALL ON *.*. Plugins: "mysql_native_password", "ed25519"
// (MariaDB; the plugin is installed if needed) and "caching_sha2_password"
// (MySQL, TiDB). One the server cannot provide gives an error wrapping
// ErrUnsupported.
func (s *Server) CreateUser(ctx context.Context, user, password, plugin string) error {
	db, err := s.openRoot()
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // INSTALL SONAME and CREATE USER in one session
	return createUser(ctx, db, s.Flavor, user, password, plugin)
}

func createUser(ctx context.Context, db *sql.DB, flavor, user, password, plugin string) error {
	account := quote(user) + "@'%'"
	var identified string
	switch {
	case flavor == FlavorMariaDB && plugin == "mysql_native_password":
		identified = "IDENTIFIED VIA mysql_native_password USING PASSWORD(" + quote(password) + ")"
	case flavor == FlavorMariaDB && plugin == "ed25519":
		if err := ensureEd25519(ctx, db); err != nil {
			return err
		}
		identified = "IDENTIFIED VIA ed25519 USING PASSWORD(" + quote(password) + ")"
	case (flavor == FlavorMySQL || flavor == FlavorTiDB) && (plugin == "mysql_native_password" || plugin == "caching_sha2_password"):
		identified = "IDENTIFIED WITH " + plugin + " BY " + quote(password)
	default:
		return fmt.Errorf("dbserver: auth plugin %q on %s: %w", plugin, flavor, ErrUnsupported)
	}
	// DROP + CREATE rather than CREATE OR REPLACE: MySQL lacks the latter.
	if _, err := db.ExecContext(ctx, "DROP USER IF EXISTS "+account); err != nil {
		return fmt.Errorf("dbserver: drop user %s: %w", user, err)
	}
	if _, err := db.ExecContext(ctx, "CREATE USER "+account+" "+identified); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1524 { // ER_PLUGIN_IS_NOT_LOADED
			return fmt.Errorf("dbserver: auth plugin %q: %v: %w", plugin, err, ErrUnsupported)
		}
		return fmt.Errorf("dbserver: create user %s (%s): %w", user, plugin, err)
	}
	if _, err := db.ExecContext(ctx, "GRANT ALL PRIVILEGES ON *.* TO "+account); err != nil {
		return fmt.Errorf("dbserver: grant to %s: %w", user, err)
	}
	return nil
}

// ensureEd25519 loads MariaDB's ed25519 auth plugin unless it is active.
func ensureEd25519(ctx context.Context, db *sql.DB) error {
	var status string
	err := db.QueryRowContext(ctx,
		"SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'ed25519'").Scan(&status)
	if err == nil && status == "ACTIVE" {
		return nil
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := db.ExecContext(ctx, "INSTALL SONAME 'auth_ed25519'"); err != nil {
		return fmt.Errorf("dbserver: INSTALL SONAME 'auth_ed25519': %v: %w", err, ErrUnsupported)
	}
	return nil
}
