package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// What check-config, serve and a reload check beyond the file itself:
// that protection is on for what the file names. See
// docs/configuration-checks.md.

// runCheckConfig reports every problem of the file at path in one run:
// the file's own (syntax, keys, values), then files and addresses, then
// with connect the backend's view (greeting, login, catalog privileges,
// the protected and lease tables). Each has its position in the file.
func runCheckConfig(stdout io.Writer, path string, connect bool) error {
	cfg, errs, err := fileProblems(path)
	if err != nil {
		return err
	}
	if cfg == nil {
		return configError(errors.Join(errs...)) // not YAML: nothing more to check
	}
	var notes []string
	if connect {
		e, n, reached := connectChecks(cfg)
		errs, notes = append(errs, e...), n
		if reached {
			errs = append(errs, checkGuardConnect(cfg)...)
		}
	}
	if len(errs) > 0 {
		return configError(errors.Join(policy.SortErrors(errs)...))
	}
	fmt.Fprintf(stdout, "%s: ok (%s, mode %s, on_stale %s)\n",
		path, plural(len(cfg.Tables), "protected table", "protected tables"), cfg.Fencing.Mode, cfg.Fencing.OnStale)
	switch {
	case len(cfg.Tables) > 0 && cfg.Backend.User == "":
		fmt.Fprintf(stdout, "note: catalog.refresh: 0s without backend.user: no schema catalog, and the protected tables cannot be checked against the backend\n")
	case len(cfg.Tables) > 0 && !connect:
		fmt.Fprintf(stdout, "note: the protected tables were not checked against the backend (--connect does)\n")
	}
	if connect {
		fmt.Fprintf(stdout, "backend %s: reachable\n", cfg.Backend.Address)
		for _, n := range notes {
			fmt.Fprintf(stdout, "note: %s\n", n)
		}
		if len(cfg.Tables) > 0 && cfg.Backend.User != "" {
			fmt.Fprintf(stdout, "protected tables: all %d checked\n", len(cfg.Tables))
		}
	}
	return nil
}

// fileProblems is every problem of the file at path that needs no
// backend: its own (policy.Check) and its files' and addresses'
// (proxy.Preflight). cfg is nil when the file is not YAML at all; err is
// set when it cannot be read.
func fileProblems(path string) (cfg *policy.Config, errs []error, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fail(exitRefused, "config: %v", err)
	}
	cfg, perr := policy.Check(path, data)
	for _, e := range policy.Errors(perr) {
		errs = append(errs, e)
	}
	if cfg != nil {
		errs = append(errs, proxy.Preflight(cfg)...)
	}
	return cfg, policy.SortErrors(errs), nil
}

// serveConfigError is serve's report of a file it cannot start with: the
// same list as check-config's, files and addresses included, not only the
// first kind of problem the loader stopped at.
func serveConfigError(path string, loadErr error) error {
	_, errs, err := fileProblems(path)
	if err != nil || len(errs) == 0 {
		return configError(loadErr)
	}
	return configError(errors.Join(errs...))
}

// connectChecks dials the backend and reads its greeting; with
// backend.user it logs in and runs proxy.CheckSchema. reached: the proxy's
// account logged in (the checks that need it can run).
func connectChecks(cfg *policy.Config) (errs []error, notes []string, reached bool) {
	errs, notes = connectChecksOf(cfg, &reached)
	return errs, notes, reached
}

func connectChecksOf(cfg *policy.Config, reached *bool) (errs []error, notes []string) {
	if cfg.Reported("backend") || cfg.Reported("backend.address") {
		return nil, nil
	}
	timeout := cfg.Timeouts.Connect.D()
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	at := func(key, format string, a ...any) []error {
		return []error{cfg.ErrorAt(key, fmt.Sprintf(format, a...))}
	}
	addr := cfg.Backend.Address
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return at("backend.address", "%s: %v", addr, err), nil
	}
	conn.SetDeadline(time.Now().Add(timeout))
	var head [5]byte
	_, err = io.ReadFull(conn, head[:])
	conn.Close()
	switch {
	case err != nil:
		return at("backend.address", "%s: no greeting: %v", addr, err), nil
	case head[4] == 0xff:
		return at("backend.address", "%s refused the connection (it answered with an error packet: host blocked, too many connections?)", addr), nil
	case head[4] != 10:
		return at("backend.address", "%s does not speak the MySQL protocol (greeting starts with 0x%02x)", addr, head[4]), nil
	}
	if cfg.Backend.User == "" || cfg.Reported("backend.user") || cfg.Reported("backend.password_env") || cfg.Reported("backend.password_file") {
		return nil, nil
	}
	db, err := proxy.OpenAdminDB(cfg.Backend)
	if err != nil {
		return nil, nil // the password's source: Preflight said why
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	rep, err := proxy.CheckSchema(ctx, db, cfg)
	if err != nil {
		return at("backend.user", "%s: login or catalog read failed: %v", cfg.Backend.User, err), nil
	}
	*reached = true
	return rep.Errors, rep.Notes
}

// protectionChecks runs at serve's start, before the proxy listens: the
// protected tables, the lease tables and the catalog account's privileges
// (proxy.CheckSchema); a problem stops serve. While the backend cannot
// be reached it waits (logging), so that a proxy started before its
// database neither serves unchecked nor exits in a restart loop. It also
// makes every reload run the same check.
func protectionChecks(ctx context.Context, reloader *policy.Reloader, logger *slog.Logger) error {
	cfg := reloader.Current()
	reloader.SetCheck(func(next *policy.Config) error { return reloadCheck(reloader.Current(), next) })
	if len(cfg.Tables) == 0 {
		return nil
	}
	if cfg.Backend.User == "" {
		logger.Warn("no schema catalog (catalog.refresh: 0s without backend.user): writes through views, triggers, " +
			"cascading foreign keys and routines reach the protected tables unfenced, and the tables are not checked against the backend")
		return nil
	}
	db, err := proxy.OpenAdminDB(cfg.Backend)
	if err != nil {
		return fmt.Errorf("backend.user: %w", err)
	}
	defer db.Close()
	var lastLog time.Time
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rep, err := proxy.CheckSchema(cctx, db, cfg)
		cancel()
		if err == nil {
			for _, n := range rep.Notes {
				logger.Warn("protected table: " + n)
			}
			if len(rep.Errors) > 0 {
				// serve would stop at the guard triggers next (proxy.New):
				// say all of it at once.
				if cfg.Fencing.DatabaseGuard == policy.GuardTriggers {
					if err := proxy.CheckDatabaseGuard(cfg, db); err != nil {
						rep.Errors = append(rep.Errors, err)
					}
				}
				return configError(errors.Join(rep.Errors...))
			}
			logger.Info("protected tables checked", "tables", len(cfg.Tables))
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stopped before the protected tables could be checked: %w", err)
		}
		if loginRefused(err) {
			return fmt.Errorf("backend.user %s: login refused, so the protected tables cannot be checked: %w", cfg.Backend.User, err)
		}
		if time.Since(lastLog) > 30*time.Second {
			logger.Warn("waiting for the backend to check the protected tables before listening", "backend", cfg.Backend.Address, "err", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// reloadCheck is a reload's share of protectionChecks, against the
// backend the proxy runs with (backend keys take effect on restart only).
func reloadCheck(running, next *policy.Config) error {
	if len(next.Tables) == 0 || running.Backend.User == "" || next.Backend.User == "" {
		return nil
	}
	db, err := proxy.OpenAdminDB(running.Backend)
	if err != nil {
		return fmt.Errorf("backend.user: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rep, err := proxy.CheckSchema(ctx, db, next)
	if err != nil {
		return fmt.Errorf("the protected tables could not be checked against the backend (%v): the running config stays", err)
	}
	if len(rep.Errors) > 0 {
		return errors.Join(rep.Errors...)
	}
	return nil
}

// loginRefused: the server answered the login with access denied; waiting
// will not change that.
func loginRefused(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1045 || me.Number == 1044 || me.Number == 1698 || me.Number == 1227)
}
