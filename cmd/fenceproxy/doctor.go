package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/catalog/infoschema"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

func init() {
	subcommands = append(subcommands, newDoctorCommand)
}

// doctorReport is what doctor found: Closure is what the proxy fences and
// refuses through the catalog (information), Findings what weakens fencing.
type doctorReport struct {
	Closure  []string `json:"closure"`
	Info     []string `json:"info"`
	Findings []string `json:"findings"`
}

func newDoctorCommand(stdout, _ io.Writer) *cobra.Command {
	var (
		config, dsn string
		asJSON      bool
		timeout     time.Duration
		trust       []string
	)
	cmd := &cobra.Command{
		Use:   "doctor --config FILE [--dsn DSN] [--json]",
		Short: "Inspect a deployment: what the catalog fences, what cannot be fenced, what allows a bypass",
		Long: "doctor connects to the backend (with --dsn, $" + envDSN + ", or backend.user of the config) and\n" +
			"reports what the schema catalog fences through what (views, trigger tables, cascading parents,\n" +
			"MERGE tables), which routines are refused, what cannot be fenced (events, dynamic SQL, bodies the\n" +
			"account cannot see, tables whose engine writes elsewhere: FEDERATED, CONNECT, SPIDER), the lease\n" +
			"tables' column types and collations, the binlog format, sysdate_is_now, time zones with daylight\n" +
			"saving time, and every account that can get around the fence, at any grant level (global,\n" +
			"schema, table, column) and through roles (expanded to the accounts that hold them): those that\n" +
			"can write a lease table, and those with TRIGGER, ALTER, CREATE VIEW, CREATE ROUTINE, EVENT or\n" +
			"DROP on a protected schema, or SUPER. Accounts that cannot log in (locked, no valid password:\n" +
			"mariadb.sys) are not findings; trusted accounts (doctor.trusted_accounts, --trust) and the\n" +
			"proxy's own account are listed as information. A grant table the account cannot read is a\n" +
			"finding that says what was not checked.\n\n" +
			"Exit codes: 0 nothing found, 1 findings (or a bad config), 2 usage, 3 database error.",
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return usageErr("--config is required")
			}
			for _, a := range trust {
				if _, err := policy.ParseAccount(a); err != nil {
					return usageErr("--trust %v", err)
				}
			}
			cfg, err := policy.Load(config)
			if err != nil {
				return fail(exitRefused, "%v", err)
			}
			db, err := doctorDB(cfg, dsn, timeout)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := doctor(ctx, db, cfg.Policy(1), accountInput{
				trusted: append(append([]string{}, cfg.Doctor.TrustedAccounts...), trust...), proxy: cfg.Backend.User})
			if err != nil {
				return fail(exitDB, "%v", err)
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				enc.Encode(rep)
			} else {
				for _, l := range rep.Closure {
					fmt.Fprintln(stdout, "catalog: "+termSafe(l))
				}
				for _, l := range rep.Info {
					fmt.Fprintln(stdout, "info: "+termSafe(l))
				}
				for _, l := range rep.Findings {
					fmt.Fprintln(stdout, "finding: "+termSafe(l))
				}
			}
			if len(rep.Findings) > 0 {
				return fail(exitRefused, "%s", plural(len(rep.Findings), "finding", "findings"))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the proxy's config file")
	f.StringVar(&dsn, "dsn", "", "database DSN (default $"+envDSN+", else backend.user of the config)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "bound on the whole inspection")
	f.StringArrayVar(&trust, "trust", nil, "an account whose privileges are meant (user@host, or a user at any host); repeatable, added to doctor.trusted_accounts")
	return cmd
}

// doctorDB opens the DSN, or the config's backend with backend.user.
func doctorDB(cfg *policy.Config, dsn string, timeout time.Duration) (*sql.DB, error) {
	if dsn == "" {
		dsn = os.Getenv(envDSN)
	}
	var mc *mysql.Config
	if dsn != "" {
		var err error
		if mc, err = mysql.ParseDSN(dsn); err != nil {
			return nil, usageErr("bad DSN (want user:password@tcp(host:3306)/database): %v", err)
		}
	} else {
		if cfg.Backend.User == "" {
			return nil, usageErr("no database: give --dsn, set %s, or configure backend.user", envDSN)
		}
		pw, err := cfg.Backend.Password()
		if err != nil {
			return nil, fail(exitDB, "backend.user: %v", err)
		}
		mc = mysql.NewConfig()
		mc.User, mc.Passwd, mc.Net, mc.Addr = cfg.Backend.User, pw, "tcp", cfg.Backend.Address
	}
	mc.Timeout = timeout
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, usageErr("bad DSN: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	return db, nil
}

func doctor(ctx context.Context, db *sql.DB, pol *policy.Policy, acc accountInput) (*doctorReport, error) {
	acc.pol = pol
	rep := &doctorReport{Closure: []string{}, Info: []string{}, Findings: []string{}}
	find := func(format string, a ...any) { rep.Findings = append(rep.Findings, fmt.Sprintf(format, a...)) }
	info := func(format string, a ...any) { rep.Info = append(rep.Info, fmt.Sprintf(format, a...)) }
	if err := db.PingContext(ctx); err != nil {
		return nil, err
	}
	prot := rewrite.ProtectedFor(pol)

	// The catalog, as the proxy would read it with this account.
	missing, err := infoschema.CheckVisibility(ctx, db)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		find("catalog: this account cannot see every object that writes tables (lacks global %s); "+
			"the proxy refuses writes to unprotected tables with such a backend.user", strings.Join(missing, ", "))
	} else {
		info("catalog: this account sees routine bodies, trigger statements, view definitions and events")
		snap, err := infoschema.Load(ctx, db)
		if err != nil {
			return nil, err
		}
		for _, l := range catalog.Close(proxy.WithoutGuardTriggers(snap, pol), prot).Lines() {
			switch {
			case strings.HasPrefix(l, "unfenceable "), strings.HasPrefix(l, "dynamic SQL"), strings.HasPrefix(l, "hidden body"):
				find("catalog: %s", l)
			default:
				rep.Closure = append(rep.Closure, l)
			}
		}
	}

	// Server settings the fence relies on.
	vars := map[string]string{}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('binlog_format', 'log_bin', 'sysdate_is_now', 'time_zone', 'system_time_zone', "+
		"'default_storage_engine', 'default_tmp_storage_engine', 'enforce_storage_engine')")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return nil, err
		}
		vars[strings.ToLower(k)] = v
	}
	rows.Close()
	info("server: binlog_format=%s log_bin=%s time_zone=%s system_time_zone=%s", vars["binlog_format"], vars["log_bin"],
		vars["time_zone"], vars["system_time_zone"])
	if strings.EqualFold(vars["log_bin"], "ON") && strings.EqualFold(vars["binlog_format"], "STATEMENT") {
		find("server: binlog_format=STATEMENT: replicas evaluate the fence's SYSDATE() with their own clock; use ROW or MIXED")
	}
	for _, v := range []string{"default_storage_engine", "default_tmp_storage_engine", "enforce_storage_engine"} {
		if e := vars[v]; e != "" && catalog.ClassOf(e) != catalog.EngineLocal {
			find("server: %s=%s: tables created without ENGINE= may write their rows elsewhere (FEDERATED, CONNECT, SPIDER), "+
				"which fenceproxy cannot fence; set a local engine (InnoDB)", v, e)
		}
	}
	if strings.EqualFold(vars["sysdate_is_now"], "ON") || vars["sysdate_is_now"] == "1" {
		find("server: sysdate_is_now=ON makes SYSDATE() the statement's NOW(), which SET TIMESTAMP moves: a session can make an expired lease look held")
	}
	var jan, jul sql.NullString
	err = db.QueryRowContext(ctx, "SELECT TIMEDIFF(CONVERT_TZ('2026-01-15 12:00:00', @@global.time_zone, '+00:00'), '2026-01-15 12:00:00'), "+
		"TIMEDIFF(CONVERT_TZ('2026-07-15 12:00:00', @@global.time_zone, '+00:00'), '2026-07-15 12:00:00')").Scan(&jan, &jul)
	switch {
	case err != nil:
		return nil, err
	case !jan.Valid || !jul.Valid:
		info("server: the time zone tables do not know the global time zone %s; daylight saving time not checked", vars["time_zone"])
	case jan.String != jul.String:
		find("server: the global time zone %s has daylight saving time (UTC offsets %s and %s): sessions that keep it "+
			"see an hour repeat; lease times are DATETIME in the session's zone. Set time_zone='+00:00'", vars["time_zone"], jan.String, jul.String)
	}

	// The lease tables.
	for _, p := range prot {
		if !p.LeaseTable {
			continue
		}
		name := p.Schema + "." + p.Table
		rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, COLUMN_TYPE, COALESCE(COLLATION_NAME, '') FROM information_schema.COLUMNS "+
			"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", p.Schema, p.Table)
		if err != nil {
			return nil, err
		}
		var cols []string
		for rows.Next() {
			var c, typ, coll string
			if err := rows.Scan(&c, &typ, &coll); err != nil {
				rows.Close()
				return nil, err
			}
			if coll != "" {
				typ += " " + coll
			}
			cols = append(cols, c+" "+typ)
		}
		rows.Close()
		if len(cols) == 0 {
			find("lease table %s: missing (or not visible to this account); create it with fenceproxy init", name)
			continue
		}
		info("lease table %s: %s", name, strings.Join(cols, ", "))
	}

	if err := doctorGuard(ctx, db, pol, info, find); err != nil {
		return nil, err
	}

	if err := doctorAccounts(ctx, db, acc, info, find); err != nil {
		return nil, err
	}
	return rep, nil
}

func each(ctx context.Context, db *sql.DB, q string, f func(a, b string), args ...any) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		f(a, b)
	}
	return rows.Err()
}
