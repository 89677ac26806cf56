package mysqld

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Accounts is what SetupAccounts made: root over TCP, and the server's
// version.
type Accounts struct {
	Root    *mysql.Config // root with its password, over TCP to Process.Addr
	Version string        // SELECT VERSION()
	Flavor  string        // from Version
}

// SetupAccounts gives root a random password for TCP use and creates
// AppUser, working over p's socket as the passwordless root@localhost of a
// fresh datadir.
func SetupAccounts(ctx context.Context, p *Process) (Accounts, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", p.Socket()
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return Accounts{}, err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)

	password := RandomHex("fp-root-", 16)
	pw := Quote(password)
	var stmts []string
	for _, host := range []string{"127.0.0.1", "::1"} {
		h := Quote(host)
		stmts = append(stmts,
			"CREATE USER IF NOT EXISTS 'root'@"+h+" IDENTIFIED BY "+pw,
			"ALTER USER 'root'@"+h+" IDENTIFIED BY "+pw,
			"GRANT ALL PRIVILEGES ON *.* TO 'root'@"+h+" WITH GRANT OPTION",
		)
	}
	// Last: it only affects new socket logins, not this session.
	stmts = append(stmts, "ALTER USER 'root'@'localhost' IDENTIFIED BY "+pw)
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return Accounts{}, fmt.Errorf("%s: %w", strings.Replace(q, pw, "'***'", 1), err)
		}
	}
	var acc Accounts
	if acc.Version, acc.Flavor, err = ServerVersion(ctx, db); err != nil {
		return Accounts{}, err
	}
	acc.Root = mysql.NewConfig()
	acc.Root.User, acc.Root.Passwd = "root", password
	acc.Root.Net, acc.Root.Addr = "tcp", p.Addr

	err = CreateUser(ctx, db, acc.Flavor, AppUser, AppPassword, "mysql_native_password")
	if errors.Is(err, ErrUnsupported) && acc.Flavor == FlavorMySQL {
		// MySQL 9 removed mysql_native_password.
		err = CreateUser(ctx, db, acc.Flavor, AppUser, AppPassword, "caching_sha2_password")
	}
	return acc, err
}

// ServerVersion asks the server its version and tells its flavor from it.
func ServerVersion(ctx context.Context, db *sql.DB) (version, flavor string, err error) {
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", "", fmt.Errorf("SELECT VERSION(): %w", err)
	}
	switch v := strings.ToLower(version); {
	case strings.Contains(v, "-tidb-"):
		flavor = FlavorTiDB
	case strings.Contains(v, "mariadb"):
		flavor = FlavorMariaDB
	default:
		flavor = FlavorMySQL
	}
	return version, flavor, nil
}

// CreateUser (re)creates user@'%' with password, authenticated by plugin,
// on db (one connection: INSTALL SONAME and CREATE USER in one session),
// and grants it ALL ON *.*. Plugins: "mysql_native_password", "ed25519"
// (MariaDB; the plugin is installed if needed) and "caching_sha2_password"
// (MySQL, TiDB). One the server cannot provide gives an error wrapping
// ErrUnsupported.
func CreateUser(ctx context.Context, db *sql.DB, flavor, user, password, plugin string) error {
	account := Quote(user) + "@'%'"
	var identified string
	switch {
	case flavor == FlavorMariaDB && plugin == "mysql_native_password":
		identified = "IDENTIFIED VIA mysql_native_password USING PASSWORD(" + Quote(password) + ")"
	case flavor == FlavorMariaDB && plugin == "ed25519":
		if err := ensureEd25519(ctx, db); err != nil {
			return err
		}
		identified = "IDENTIFIED VIA ed25519 USING PASSWORD(" + Quote(password) + ")"
	case (flavor == FlavorMySQL || flavor == FlavorTiDB) && (plugin == "mysql_native_password" || plugin == "caching_sha2_password"):
		identified = "IDENTIFIED WITH " + plugin + " BY " + Quote(password)
	default:
		return fmt.Errorf("mysqld: auth plugin %q on %s: %w", plugin, flavor, ErrUnsupported)
	}
	// DROP + CREATE rather than CREATE OR REPLACE: MySQL lacks the latter.
	if _, err := db.ExecContext(ctx, "DROP USER IF EXISTS "+account); err != nil {
		return fmt.Errorf("mysqld: drop user %s: %w", user, err)
	}
	if _, err := db.ExecContext(ctx, "CREATE USER "+account+" "+identified); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1524 { // ER_PLUGIN_IS_NOT_LOADED
			return fmt.Errorf("mysqld: auth plugin %q: %v: %w", plugin, err, ErrUnsupported)
		}
		return fmt.Errorf("mysqld: create user %s (%s): %w", user, plugin, err)
	}
	if _, err := db.ExecContext(ctx, "GRANT ALL PRIVILEGES ON *.* TO "+account); err != nil {
		return fmt.Errorf("mysqld: grant to %s: %w", user, err)
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
		return fmt.Errorf("mysqld: INSTALL SONAME 'auth_ed25519': %v: %w", err, ErrUnsupported)
	}
	return nil
}
