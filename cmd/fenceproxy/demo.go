package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/internal/mysqld"
	"github.com/fenceproxy/fenceproxy/policy"
)

func init() {
	subcommands = append(subcommands, newDemoCommand)
}

// newDemoCommand starts a disposable server and the proxy in front of it,
// plays the stale-writer story step by step, then leaves both running for
// the user to explore until Ctrl-C.
func newDemoCommand(stdout, _ io.Writer) *cobra.Command {
	var (
		listen string
		ttl    time.Duration
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Play the stale-writer story against a throwaway database",
		Long: "demo starts a disposable MariaDB/MySQL server (it needs mariadbd or mysqld installed) and the\n" +
			"proxy in front of it, plays the story of a stale writer whose write is rejected, and keeps\n" +
			"both running for you to try until Ctrl-C.",
		Args: exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			if ttl <= 0 {
				return usageErr("--ttl must be positive, got %v", ttl)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			d := &demo{out: stdout, ttl: ttl}
			if err := d.run(ctx, listen, !noWait); err != nil {
				if errors.Is(err, mysqld.ErrNotFound) {
					return fail(exitRefused, "no MariaDB or MySQL server binary (mariadbd or mysqld) on this machine; "+
						"on Debian or Ubuntu: sudo apt-get install mariadb-server (%v)", err)
				}
				return fail(exitRefused, "%v", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:6033", "address for the proxy (a free port is used if taken)")
	f.DurationVar(&ttl, "ttl", 2*time.Second, "worker A's lease time to live")
	f.BoolVar(&noWait, "exit", false, "exit after the story instead of keeping the proxy running")
	return cmd
}

type demo struct {
	out io.Writer
	ttl time.Duration
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) step(who, format string, args ...any) {
	fmt.Fprintf(d.out, "  %-8s %s\n", who, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context, listen string, wait bool) error {
	d.say("fenceproxy demo: a lease that expires while its worker is still writing.\n")
	d.say("Starting a throwaway database server...")
	srv, err := mysqld.Start(ctx, mysqld.Options{})
	if err != nil {
		return err
	}
	defer srv.Close()
	d.say("  %s %s on %s (data in %s, removed on exit)", srv.Flavor, srv.Version, srv.Addr, srv.Dir)

	root, err := sql.Open("mysql", srv.RootDSN(""))
	if err != nil {
		return err
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE DATABASE app",
		"CREATE TABLE app.reconciliation_runs (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, result VARCHAR(100), worker CHAR(1), token BIGINT UNSIGNED)",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return err
		}
	}

	dir, err := os.MkdirTemp("", "fenceproxy-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if ln, err := net.Listen("tcp", listen); err == nil {
		ln.Close()
	} else {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	listen = ln.Addr().String()
	ln.Close()
	auditFile := filepath.Join(dir, "audit.jsonl")
	cfgFile := filepath.Join(dir, "fenceproxy.yaml")
	pwFile := filepath.Join(dir, "fenceproxy-password")
	if err := demoProxyAccount(ctx, root, pwFile); err != nil {
		return err
	}
	cfgText := fmt.Sprintf(`listen: %s
admin: ""
log_level: error
backend:
  address: %s
  user: fenceproxy                # the proxy's own account: schema catalog, lease functions, audit table
  password_file: %s
fencing:
  database_guard: triggers
tables:
  - name: app.reconciliation_runs
    lease: admin:reconciliation
audit:
  file: %s
`, listen, srv.Addr, pwFile, auditFile)
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o600); err != nil {
		return err
	}
	// What fenceproxy init --config does: the lease and audit tables, and
	// the guard triggers on the protected table.
	cfg, err := policy.Load(cfgFile)
	if err != nil {
		return err
	}
	if _, err := initFromConfig(ctx, root, cfg); err != nil {
		return err
	}
	for _, q := range demoTableGrants {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("the proxy's account: %w", err)
		}
	}
	reloader, err := policy.NewReloader(cfgFile)
	if err != nil {
		return err
	}
	proxyCtx, stopProxy := context.WithCancel(context.Background())
	defer stopProxy()
	proxyDone := make(chan error, 1)
	level := new(slog.LevelVar)
	level.Set(slog.LevelError)
	go func() {
		proxyDone <- serve(proxyCtx, func() {}, reloader, logging.New(os.Stderr, logging.FormatText, level), level)
	}()
	if err := awaitListening(ctx, listen); err != nil {
		return err
	}
	d.say("Started fenceproxy on %s in front of it, protecting app.reconciliation_runs\nunder the lease admin:reconciliation (config: %s).\n", listen, cfgFile)

	dsn := fmt.Sprintf("%s:%s@tcp(%s)/app", mysqld.AppUser, mysqld.AppPassword, listen)
	a, err := openOne(ctx, dsn)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := openOne(ctx, dsn)
	if err != nil {
		return err
	}
	defer b.Close()

	d.say("1. Worker A takes the lease and starts the nightly reconciliation run.")
	var tokA sql.NullInt64
	ttlSec := fmt.Sprintf("%.3f", d.ttl.Seconds())
	if err := a.QueryRowContext(ctx, "SELECT fence_acquire('admin:reconciliation', "+ttlSec+")").Scan(&tokA); err != nil {
		return err
	}
	d.step("[A]", "SELECT fence_acquire('admin:reconciliation', %s)  -> fence token %d", ttlSec, tokA.Int64)
	if _, err := a.ExecContext(ctx, "INSERT INTO reconciliation_runs (id, status, worker, token) VALUES (1, 'running', 'A', @fence_token)"); err != nil {
		return err
	}
	d.step("[A]", "INSERT INTO reconciliation_runs ... 'running'                -> 1 row")

	d.say("\n2. Worker A stalls (a GC pause, a slow API, a frozen VM) past its lease...")
	if err := awaitExpired(ctx, root, "admin:reconciliation"); err != nil {
		return err
	}
	d.step("[db]", "admin:reconciliation expired by database time")

	d.say("\n3. Worker B sees the lease expired, takes it over and completes the run.")
	var tokB sql.NullInt64
	if err := b.QueryRowContext(ctx, "SELECT fence_acquire('admin:reconciliation', 60)").Scan(&tokB); err != nil {
		return err
	}
	d.step("[B]", "SELECT fence_acquire('admin:reconciliation', 60)  -> fence token %d", tokB.Int64)
	res, err := b.ExecContext(ctx, "UPDATE reconciliation_runs SET status = 'done', result = 'B: 1200 rows matched', worker = 'B', token = @fence_token WHERE id = 1")
	if err != nil {
		return err
	}
	n, _ := res.RowsAffected()
	d.step("[B]", "UPDATE reconciliation_runs SET status = 'done', result = 'B: ...'  -> %s", plural(int(n), "row", "rows"))
	var released int
	if err := b.QueryRowContext(ctx, "SELECT fence_release()").Scan(&released); err != nil {
		return err
	}
	d.step("[B]", "SELECT fence_release()  -> %d (the lease expires now; its token stays %d)", released, tokB.Int64)

	d.say("\n4. Worker A wakes up, unaware, and writes its stale result.")
	res, err = a.ExecContext(ctx, "UPDATE reconciliation_runs SET status = 'done', result = 'A: stale totals', worker = 'A', token = @fence_token WHERE id = 1")
	if err != nil {
		return err
	}
	n, _ = res.RowsAffected()
	d.step("[A]", "UPDATE reconciliation_runs SET status = 'done', result = 'A: ...'  -> %s", plural(int(n), "row", "rows"))
	d.step("", "fenceproxy added the fence; the database found token %d stale and matched nothing.", tokA.Int64)
	if err := d.directStale(ctx, a, srv.Addr); err != nil {
		return err
	}

	var status, result, worker string
	var token int64
	if err := root.QueryRowContext(ctx, "SELECT status, result, worker, token FROM app.reconciliation_runs WHERE id = 1").Scan(&status, &result, &worker, &token); err != nil {
		return err
	}
	d.say("\n5. B's result is intact:")
	d.step("[db]", "status=%s result=%q worker=%s token=%d", status, result, worker, token)
	d.say("\n   and the rejected write is in the audit log (%s):", auditFile)
	if line, err := lastLine(auditFile); err == nil {
		d.step("", "%s", line)
	}

	if !wait {
		// The proxy stops before the server does: its own account's
		// pool and audit table writer would otherwise find it gone.
		stopProxy()
		return <-proxyDone
	}
	d.say(`
The proxy keeps running. Try it yourself (Ctrl-C to stop and remove everything):

  mariadb -h %s -P %s -u %s -p'%s' app

  SELECT fence_acquire('admin:reconciliation', 30);             -- the next fence token
  UPDATE reconciliation_runs SET result = 'mine' WHERE id = 1;   -- 1 row: you hold the lease
  SELECT fence_status();
  SET @fence_token = @fence_token - 1;
  UPDATE reconciliation_runs SET result = 'stale' WHERE id = 1;  -- 0 rows, audited
  TRUNCATE reconciliation_runs;                                  -- refused: cannot be fenced
`, host(listen), port(listen), mysqld.AppUser, mysqld.AppPassword)
	select {
	case <-ctx.Done():
		d.say("\nStopping.")
	case err := <-proxyDone:
		return err
	}
	stopProxy()
	return <-proxyDone
}

// directStale has worker A write straight to the database with its stale
// fence, past the proxy: the guard trigger refuses it.
func (d *demo) directStale(ctx context.Context, a *sql.Conn, dbAddr string) error {
	d.say("\n   Worker A's job could also bypass the proxy and write to the database itself:")
	var name, owner []byte
	var token uint64
	if err := a.QueryRowContext(ctx, "SELECT @fence_lease, @fence_owner, @fence_token").Scan(&name, &owner, &token); err != nil {
		return err
	}
	direct, err := openOne(ctx, fmt.Sprintf("%s:%s@tcp(%s)/app", mysqld.AppUser, mysqld.AppPassword, dbAddr))
	if err != nil {
		return err
	}
	defer direct.Close()
	if _, err := direct.ExecContext(ctx, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", name, owner, token); err != nil {
		return err
	}
	_, err = direct.ExecContext(ctx, "UPDATE reconciliation_runs SET result = 'A: stale totals' WHERE id = 1")
	if err == nil {
		return errors.New("the guard trigger let a stale write through")
	}
	d.step("[A]", "UPDATE reconciliation_runs ... on the database directly  -> %v", err)
	d.step("", "the guard trigger that fenceproxy init installed refused it (fencing.database_guard: triggers).")
	return nil
}

func openOne(ctx context.Context, dsn string) (*sql.Conn, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db.Conn(ctx)
}

func awaitListening(ctx context.Context, addr string) error {
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("the proxy did not start listening on %s", addr)
}

// awaitExpired waits until the database says the lease has expired.
func awaitExpired(ctx context.Context, db *sql.DB, name string) error {
	for {
		var held bool
		if err := db.QueryRowContext(ctx, "SELECT leased_until > SYSDATE(3) FROM app.fenced_job_leases WHERE lease_name = ?", name).Scan(&held); err != nil {
			return err
		}
		if !held {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func lastLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last = sc.Text()
	}
	return strings.TrimSpace(last), sc.Err()
}

func host(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// demoGrants are what the proxy's own account needs, as the Quick start
// and docs/configuration-checks.md give them: the schema catalog reads
// every schema; the lease functions and the audit table write in the
// protected tables' schema (app), once those tables exist.
var (
	demoGrants      = []string{"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO 'fenceproxy'@'%'"}
	demoTableGrants = []string{
		"GRANT SELECT, INSERT, UPDATE ON app.fenced_job_leases TO 'fenceproxy'@'%'",
		"GRANT SELECT, INSERT, DELETE ON app.fenced_audit TO 'fenceproxy'@'%'",
	}
)

// demoProxyAccount creates the proxy's account with a random password,
// written to pwFile for backend.password_file.
func demoProxyAccount(ctx context.Context, root *sql.DB, pwFile string) error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	pw := hex.EncodeToString(b)
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		return err
	}
	for _, q := range append([]string{"CREATE USER 'fenceproxy'@'%' IDENTIFIED BY '" + pw + "'"}, demoGrants...) {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("the proxy's account: %w", err)
		}
	}
	return nil
}
