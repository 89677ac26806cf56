package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

func init() {
	subcommands = append(subcommands, newInitCommand, newLeaseCommand)
}

// Environment variables read by init and lease, so that secrets stay off
// command lines (which every local user can read in ps).
const (
	envDSN   = "FENCEPROXY_DSN"
	envOwner = "FENCEPROXY_LEASE_OWNER"
)

const leaseLong = `Leases over the lease table, with the database's clock.

DSN: go-sql-driver form, user:password@tcp(host:3306)/database. Prefer
$FENCEPROXY_DSN to --dsn: command lines are visible to every local user.
The owner token is a secret too: --owner defaults to $FENCEPROXY_LEASE_OWNER.
TTL: a duration (30s, 1m30s) or seconds (30, 1.5).

acquire prints the owner token in full (renew and release need it); show and
list print a short owner id (a hash) unless --show-owner is given.

Exit codes: 0 ok; 1 refused: the lease is held (acquire), lost (renew,
release: expired, taken over or released) or not found (show) -- with --json
the object printed says which: {"error": "held"|"lost"|"not_found", ...};
2 usage error; 3 database error (connection, SQL, table definition).`

// leaseFlags are the flags every init/lease subcommand takes.
type leaseFlags struct {
	dsn, table string
	json       bool
	timeout    time.Duration
}

func (lf *leaseFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&lf.dsn, "dsn", "", "database DSN (default $"+envDSN+")")
	f.StringVar(&lf.table, "table", lease.DefaultTable, "lease table, NAME or SCHEMA.NAME")
	f.BoolVar(&lf.json, "json", false, "print JSON")
	f.DurationVar(&lf.timeout, "timeout", 10*time.Second, "bound on the whole operation")
}

// openDB opens the DSN from the flag or the environment. The session's time
// zone is pinned to UTC unless the DSN sets one: lease times are compared in
// the session's zone, and a zone with daylight saving time repeats an hour.
func openDB(lf *leaseFlags) (*sql.DB, error) {
	dsn := lf.dsn
	if dsn == "" {
		dsn = os.Getenv(envDSN)
	}
	if dsn == "" {
		return nil, usageErr("no database: give --dsn or set %s", envDSN)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usageErr("bad DSN (want user:password@tcp(host:3306)/database): %v", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = lf.timeout
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usageErr("bad DSN: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	return db, nil
}

func newInitCommand(stdout, _ io.Writer) *cobra.Command {
	var lf leaseFlags
	var config string
	cmd := &cobra.Command{
		Use:   "init [--dsn DSN] [--table NAME | --config FILE]",
		Short: "Create the lease and audit tables (or check existing ones), and the guard triggers",
		Long: "init creates the lease table and the audit table in the DSN's database (or the schema of\n" +
			"--table), and refuses an existing lease table whose definition would make fencing unsafe\n" +
			"or slow. An existing lease table without the fence_writes column (which fenced writes bump\n" +
			"on MariaDB Galera) gets it. Run it once per schema that holds protected tables.\n\n" +
			"With --config it does that for the lease table of every protected table of the config, and\n" +
			"with fencing.database_guard: triggers installs the guard triggers (BEFORE INSERT, UPDATE and\n" +
			"DELETE) on every protected table, partitioning the lease table they read (PARTITION p0);\n" +
			"outdated guard triggers are replaced, the tables' own triggers left alone. With\n" +
			"database_guard: off it removes the guard triggers of the config's tables. The DSN's account\n" +
			"becomes the triggers' definer (it needs TRIGGER, ALTER on the lease table, and SELECT on it).",
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config != "" && cmd.Flags().Changed("table") {
				return usageErr("give --table or --config, not both: the config names the lease table")
			}
			var cfg *policy.Config
			if config != "" {
				var err error
				if cfg, err = policy.Load(config); err != nil {
					return configError(err)
				}
			} else if err := lease.ValidateTable(lf.table); err != nil {
				return usageErr("%v", err)
			}
			db, err := openDB(&lf)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), lf.timeout)
			defer cancel()
			if cfg != nil {
				rep, err := initFromConfig(ctx, db, cfg)
				if err != nil {
					return err
				}
				if lf.json {
					writeJSON(stdout, rep)
				} else {
					rep.print(stdout)
				}
				return nil
			}
			if err := lease.CreateSchema(ctx, db, lf.table); err != nil {
				return fail(exitDB, "%v", err)
			}
			audit := lease.AuditTable
			if schema, _, ok := strings.Cut(lf.table, "."); ok {
				audit = schema + "." + audit
			}
			if lf.json {
				writeJSON(stdout, map[string]string{"lease_table": lf.table, "audit_table": audit})
			} else {
				fmt.Fprintf(stdout, "ready: lease table %s, audit table %s\n", termSafe(lf.table), termSafe(audit))
			}
			return nil
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&config, "config", "", "the proxy's config file: the lease tables of its protected tables, and their guard triggers")
	return cmd
}

// leaseOp holds the flags of the lease subcommands.
type leaseOp struct {
	lf        *leaseFlags
	ttlText   string
	owner     string
	token     uint64
	showOwner bool
}

func newLeaseCommand(stdout, stderr io.Writer) *cobra.Command {
	op := &leaseOp{lf: &leaseFlags{}}
	cmd := group(&cobra.Command{
		Use:   "lease",
		Short: "Acquire, renew, release, show or list leases",
		Long:  leaseLong,
	})
	op.lf.register(cmd)
	out := func() output {
		return output{stdout: stdout, stderr: stderr, json: op.lf.json, showOwner: op.showOwner}
	}
	nameArg := exactArgs(1, "exactly one lease NAME")

	acquire := &cobra.Command{
		Use:   "acquire NAME --ttl TTL [--owner OWNER]",
		Short: "Take a lease that is free or expired; prints the new fence token and owner",
		Args:  nameArg,
		RunE: func(_ *cobra.Command, args []string) error {
			name, ttl, err := op.check(args, true, false)
			if err != nil {
				return err
			}
			return op.with(func(ctx context.Context, store *lease.Store) error {
				var opts []lease.AcquireOption
				if op.owner != "" {
					opts = append(opts, lease.WithOwner(op.owner))
				}
				l, err := store.Acquire(ctx, name, ttl, opts...)
				if err != nil {
					return out().failure(ctx, store, name, err)
				}
				out().lease("acquired", l, ttl, true)
				return nil
			})
		},
	}
	acquire.Flags().StringVar(&op.ttlText, "ttl", "", "time to live: a duration (30s) or seconds (30, 1.5)")
	acquire.Flags().StringVar(&op.owner, "owner", "", "owner token (default: $"+envOwner+", else a fresh random one)")

	renew := &cobra.Command{
		Use:   "renew NAME --owner OWNER --token N --ttl TTL",
		Short: "Extend a lease that is still held by this owner and token",
		Args:  nameArg,
		RunE: func(_ *cobra.Command, args []string) error {
			name, ttl, err := op.check(args, true, true)
			if err != nil {
				return err
			}
			return op.with(func(ctx context.Context, store *lease.Store) error {
				l, err := store.Renew(ctx, lease.Lease{Name: name, Owner: op.owner, Token: op.token}, ttl)
				if err != nil {
					return out().failure(ctx, store, name, err)
				}
				out().lease("renewed", l, ttl, false)
				return nil
			})
		},
	}
	renew.Flags().StringVar(&op.ttlText, "ttl", "", "time to live from now: a duration (30s) or seconds (30, 1.5)")
	renew.Flags().StringVar(&op.owner, "owner", "", "owner token (default $"+envOwner+")")
	renew.Flags().Uint64Var(&op.token, "token", 0, "fence token")

	release := &cobra.Command{
		Use:   "release NAME --owner OWNER --token N",
		Short: "Expire a lease held by this owner and token (the row and its token stay)",
		Args:  nameArg,
		RunE: func(_ *cobra.Command, args []string) error {
			name, _, err := op.check(args, false, true)
			if err != nil {
				return err
			}
			return op.with(func(ctx context.Context, store *lease.Store) error {
				if err := store.Release(ctx, lease.Lease{Name: name, Owner: op.owner, Token: op.token}); err != nil {
					return out().failure(ctx, store, name, err)
				}
				if op.lf.json {
					writeJSON(stdout, map[string]any{"name": name, "token": op.token, "released": true})
				} else {
					fmt.Fprintf(stdout, "released %s at token %d\n", displayName(name), op.token)
				}
				return nil
			})
		},
	}
	release.Flags().StringVar(&op.owner, "owner", "", "owner token (default $"+envOwner+")")
	release.Flags().Uint64Var(&op.token, "token", 0, "fence token")

	show := &cobra.Command{
		Use:   "show NAME [--show-owner]",
		Short: "Show one lease: state, token, expiry, owner id",
		Args:  nameArg,
		RunE: func(_ *cobra.Command, args []string) error {
			name, _, err := op.check(args, false, false)
			if err != nil {
				return err
			}
			return op.with(func(ctx context.Context, store *lease.Store) error {
				st, err := store.Get(ctx, name)
				if err != nil {
					return out().failure(ctx, store, name, err)
				}
				if op.lf.json {
					writeJSON(stdout, out().statusJSON(st))
				} else {
					out().status(st)
				}
				return nil
			})
		},
	}
	show.Flags().BoolVar(&op.showOwner, "show-owner", false, "print the owner token in full (a secret)")

	list := &cobra.Command{
		Use:   "list [--show-owner]",
		Short: "List every lease in the table",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			if _, _, err := op.check(nil, false, false); err != nil {
				return err
			}
			return op.with(func(ctx context.Context, store *lease.Store) error {
				sts, err := store.List(ctx)
				if err != nil {
					return out().failure(ctx, store, "", err)
				}
				out().list(sts)
				return nil
			})
		},
	}
	list.Flags().BoolVar(&op.showOwner, "show-owner", false, "print owner tokens in full (secrets)")

	cmd.AddCommand(acquire, renew, release, show, list)
	return cmd
}

// check validates the arguments and flags shared by the subcommands and
// returns the lease name (if any) and the TTL (if wanted).
func (op *leaseOp) check(args []string, wantTTL, wantOwnerToken bool) (string, time.Duration, error) {
	var name string
	if len(args) == 1 {
		name = args[0]
		if err := lease.ValidateName(name); err != nil {
			return "", 0, usageErr("%v", err)
		}
	}
	if err := lease.ValidateTable(op.lf.table); err != nil {
		return "", 0, usageErr("%v", err)
	}
	if op.owner == "" && (wantTTL || wantOwnerToken) {
		op.owner = os.Getenv(envOwner)
	}
	if op.owner != "" {
		if err := lease.ValidateOwner(op.owner); err != nil {
			return "", 0, usageErr("%v", err)
		}
	}
	if wantOwnerToken {
		if op.owner == "" {
			return "", 0, usageErr("--owner (or $%s) is required", envOwner)
		}
		if op.token == 0 {
			return "", 0, usageErr("--token is required (fence tokens start at 1)")
		}
	}
	var ttl time.Duration
	if wantTTL {
		if op.ttlText == "" {
			return "", 0, usageErr("--ttl is required (for example --ttl 30s)")
		}
		var err error
		if ttl, err = parseTTL(op.ttlText); err != nil {
			return "", 0, usageErr("%v", err)
		}
	}
	return name, ttl, nil
}

// with opens the store and runs f within the --timeout bound.
func (op *leaseOp) with(f func(context.Context, *lease.Store) error) error {
	db, err := openDB(op.lf)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := lease.NewStore(db, op.lf.table)
	if err != nil {
		return usageErr("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), op.lf.timeout)
	defer cancel()
	return f(ctx, store)
}

// parseTTL reads "30s", "1m30s" or plain seconds "30", "1.5".
func parseTTL(s string) (time.Duration, error) {
	if d, err := lease.ParseTTLSeconds(s); err == nil {
		return d, nil
	} else if s != "" && strings.Trim(s, "0123456789.") == "" {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ttl %q: want a duration like 30s or seconds like 1.5", s)
	}
	if err := lease.ValidateTTL(d); err != nil {
		return 0, err
	}
	return d, nil
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

type output struct {
	stdout, stderr  io.Writer
	json, showOwner bool
}

func (o output) owner(owner string) string {
	if o.showOwner {
		return printableOwner(owner)
	}
	return lease.OwnerHash(owner)
}

// printableOwner prints an owner token as is if it is printable text, else
// as 0x-prefixed hex.
func printableOwner(owner string) string {
	for _, r := range owner {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || r == ' ' {
			return "0x" + fmt.Sprintf("%x", owner)
		}
	}
	return owner
}

func (o output) lease(verb string, l lease.Lease, ttl time.Duration, withOwner bool) {
	if o.json {
		m := map[string]any{
			"name": l.Name, "token": l.Token, "owner_id": lease.OwnerHash(l.Owner),
			"until": l.Until.UTC().Format(time.RFC3339Nano), "ttl_seconds": ttl.Seconds(),
		}
		if withOwner {
			m["owner"] = l.Owner
		}
		writeJSON(o.stdout, m)
		return
	}
	fmt.Fprintf(o.stdout, "%s %s\n", verb, displayName(l.Name))
	fmt.Fprintf(o.stdout, "  token:    %d\n", l.Token)
	if withOwner {
		fmt.Fprintf(o.stdout, "  owner:    %s\n", printableOwner(l.Owner))
		fmt.Fprintf(o.stdout, "            (a secret: renew and release need it; shown elsewhere as owner id %s)\n", lease.OwnerHash(l.Owner))
	} else {
		fmt.Fprintf(o.stdout, "  owner id: %s\n", lease.OwnerHash(l.Owner))
	}
	fmt.Fprintf(o.stdout, "  until:    %s (database time, ttl %s)\n", l.Until.UTC().Format(timeFormat), humanDuration(ttl))
}

func (o output) status(st lease.Status) {
	fmt.Fprintf(o.stdout, "lease:    %s\n", displayName(st.Name))
	fmt.Fprintf(o.stdout, "state:    %s\n", state(st))
	fmt.Fprintf(o.stdout, "token:    %d\n", st.Token)
	fmt.Fprintf(o.stdout, "until:    %s\n", st.Until.UTC().Format(timeFormat))
	if o.showOwner {
		fmt.Fprintf(o.stdout, "owner:    %s\n", o.owner(st.Owner))
	}
	fmt.Fprintf(o.stdout, "owner id: %s\n", lease.OwnerHash(st.Owner))
}

func (o output) statusJSON(st lease.Status) map[string]any {
	m := map[string]any{
		"name": st.Name, "token": st.Token, "held": st.Held,
		"until":             st.Until.UTC().Format(time.RFC3339Nano),
		"remaining_seconds": st.Remaining.Seconds(),
		"owner_id":          lease.OwnerHash(st.Owner),
	}
	if o.showOwner {
		m["owner"] = st.Owner
	}
	return m
}

func state(st lease.Status) string {
	if st.Held {
		return "held, expires in " + humanDuration(st.Remaining)
	}
	return "expired " + humanDuration(-st.Remaining) + " ago"
}

// humanDuration prints d for people: "1.5s", "4m20s", "3h05m", "11d13h".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}

func (o output) list(sts []lease.Status) {
	if o.json {
		objs := make([]map[string]any, 0, len(sts))
		for _, st := range sts {
			objs = append(objs, o.statusJSON(st))
		}
		writeJSON(o.stdout, objs)
		return
	}
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	ownerCol := "OWNER ID"
	if o.showOwner {
		ownerCol = "OWNER"
	}
	fmt.Fprintf(tw, "NAME\tTOKEN\tSTATE\tUNTIL\t%s\n", ownerCol)
	for _, st := range sts {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", displayName(st.Name), st.Token, state(st),
			st.Until.UTC().Format(timeFormat), o.owner(st.Owner))
	}
	tw.Flush()
	if len(sts) == 0 {
		fmt.Fprintln(o.stderr, "no leases")
	}
}

// failure turns a lease error into the command's error and exit code. For
// a held lease the message also names the current holder (owner id only);
// with --json the same goes to stdout as an object. A missing lease table
// gets the hint to run init.
func (o output) failure(ctx context.Context, store *lease.Store, name string, err error) error {
	kind, code := "", exitDB
	switch {
	case errors.Is(err, lease.ErrHeld):
		kind, code = "held", exitRefused
	case errors.Is(err, lease.ErrLost):
		kind, code = "lost", exitRefused
	case errors.Is(err, lease.ErrNotFound):
		kind, code = "not_found", exitRefused
	case errors.Is(err, lease.ErrInvalid):
		kind, code = "invalid", exitUsage
	default:
		kind = "database"
	}
	msg := cleanMessage(err.Error())
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == 1146 {
		msg += " (run fenceproxy init to create the lease table, or name it with --table)"
	}
	var cur *lease.Status
	if kind == "held" {
		if st, gerr := store.Get(ctx, name); gerr == nil {
			cur = &st
			msg += fmt.Sprintf("\n  holder: owner id %s, token %d, %s", lease.OwnerHash(st.Owner), st.Token, state(st))
		}
	}
	if o.json {
		m := map[string]any{"error": kind, "message": cleanMessage(err.Error())}
		if name != "" {
			m["name"] = name
		}
		if cur != nil {
			c := o.statusJSON(*cur)
			delete(c, "owner") // the holder's secret is never printed
			m["current"] = c
		}
		writeJSON(o.stdout, m)
	}
	return &exitError{code: code, err: errors.New(msg)}
}

// displayName prints a lease name for a terminal (see termSafe).
func displayName(name string) string { return termSafe(name) }

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
