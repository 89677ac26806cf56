package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
)

func init() {
	commands["init"] = command{"create the lease and audit tables", runInit}
	commands["lease"] = command{"acquire, renew, release, show or list leases", runLease}
}

// Exit codes of init and lease.
const (
	exitOK      = 0
	exitRefused = 1 // held (acquire), lost (renew, release), not found (show)
	exitUsage   = 2
	exitDB      = 3 // connection, SQL or schema error
)

// Environment variables read by init and lease, so that secrets stay off
// command lines (which every local user can read in ps).
const (
	envDSN   = "FENCEPROXY_DSN"
	envOwner = "FENCEPROXY_LEASE_OWNER"
)

const leaseUsage = `usage:
  fenceproxy init  [--dsn DSN] [--table NAME]
  fenceproxy lease acquire NAME --ttl TTL [--owner OWNER]
  fenceproxy lease renew   NAME --owner OWNER --token N --ttl TTL
  fenceproxy lease release NAME --owner OWNER --token N
  fenceproxy lease show    NAME [--show-owner]
  fenceproxy lease list    [--show-owner]

common flags: --dsn DSN (default $FENCEPROXY_DSN) --table NAME (default fenced_job_leases)
              --json --timeout DURATION (default 10s)

DSN: go-sql-driver form, user:password@tcp(host:3306)/database. Prefer
$FENCEPROXY_DSN to --dsn: command lines are visible to every local user.
The owner token is a secret too: --owner defaults to $FENCEPROXY_LEASE_OWNER.
TTL: a duration (30s, 1m30s) or seconds (30, 1.5). All times are the database's.

acquire prints the owner token in full (renew and release need it); show and
list print a short owner id (a hash) unless --show-owner is given.

exit codes: 0 ok; 1 refused: the lease is held (acquire), lost (renew,
release: expired, taken over or released) or not found (show) -- with --json
the object printed says which: {"error": "held"|"lost"|"not_found", ...};
2 usage error; 3 database error (connection, SQL, table definition).
`

// leaseFlags are the flags every init/lease subcommand takes.
type leaseFlags struct {
	dsn, table string
	json       bool
	timeout    time.Duration
}

func newLeaseFlagSet(name string, stderr io.Writer, lf *leaseFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, leaseUsage) }
	fs.StringVar(&lf.dsn, "dsn", "", "database DSN (default $"+envDSN+")")
	fs.StringVar(&lf.table, "table", lease.DefaultTable, "lease table, NAME or SCHEMA.NAME")
	fs.BoolVar(&lf.json, "json", false, "print JSON")
	fs.DurationVar(&lf.timeout, "timeout", 10*time.Second, "bound on the whole operation")
	return fs
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("acquire NAME --ttl 30s"), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// openDB opens the DSN from the flag or the environment. The session's time
// zone is pinned to UTC unless the DSN sets one: lease times are compared in
// the session's zone, and a zone with daylight saving time repeats an hour.
func openDB(lf *leaseFlags, stderr io.Writer) (*sql.DB, int) {
	dsn := lf.dsn
	if dsn == "" {
		dsn = os.Getenv(envDSN)
	}
	if dsn == "" {
		fmt.Fprintf(stderr, "fenceproxy: no database: give --dsn or set %s\n", envDSN)
		return nil, exitUsage
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		fmt.Fprintf(stderr, "fenceproxy: bad DSN: %v\n", err)
		return nil, exitUsage
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
		fmt.Fprintf(stderr, "fenceproxy: bad DSN: %v\n", err)
		return nil, exitUsage
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	return db, exitOK
}

func runInit(args []string, stdout, stderr io.Writer) int {
	var lf leaseFlags
	fs := newLeaseFlagSet("init", stderr, &lf)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil || len(pos) != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "fenceproxy init: unexpected argument %q\n", pos[0])
		}
		return exitUsage
	}
	if err := lease.ValidateTable(lf.table); err != nil {
		fmt.Fprintf(stderr, "fenceproxy init: %v\n", err)
		return exitUsage
	}
	db, code := openDB(&lf, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), lf.timeout)
	defer cancel()
	if err := lease.CreateSchema(ctx, db, lf.table); err != nil {
		fmt.Fprintf(stderr, "fenceproxy init: %v\n", err)
		return exitDB
	}
	audit := lease.AuditTable
	if schema, _, ok := strings.Cut(lf.table, "."); ok {
		audit = schema + "." + audit
	}
	if lf.json {
		writeJSON(stdout, map[string]string{"lease_table": lf.table, "audit_table": audit})
	} else {
		fmt.Fprintf(stdout, "ready: lease table %s, audit table %s\n", lf.table, audit)
	}
	return exitOK
}

func runLease(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, leaseUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub, args := args[0], args[1:]
	var (
		lf                 leaseFlags
		ttlText, owner     string
		token              uint64
		showOwner          bool
		wantName, needsTTL bool
		needsOwnerToken    bool
	)
	fs := newLeaseFlagSet("lease "+sub, stderr, &lf)
	switch sub {
	case "acquire":
		wantName, needsTTL = true, true
		fs.StringVar(&ttlText, "ttl", "", "time to live: a duration (30s) or seconds (30, 1.5)")
		fs.StringVar(&owner, "owner", "", "owner token (default: $"+envOwner+", else a fresh random one)")
	case "renew":
		wantName, needsTTL, needsOwnerToken = true, true, true
		fs.StringVar(&ttlText, "ttl", "", "time to live from now: a duration (30s) or seconds (30, 1.5)")
		fs.StringVar(&owner, "owner", "", "owner token (default $"+envOwner+")")
		fs.Uint64Var(&token, "token", 0, "fence token")
	case "release":
		wantName, needsOwnerToken = true, true
		fs.StringVar(&owner, "owner", "", "owner token (default $"+envOwner+")")
		fs.Uint64Var(&token, "token", 0, "fence token")
	case "show":
		wantName = true
		fs.BoolVar(&showOwner, "show-owner", false, "print the owner token in full (a secret)")
	case "list":
		fs.BoolVar(&showOwner, "show-owner", false, "print owner tokens in full (secrets)")
	default:
		fmt.Fprintf(stderr, "fenceproxy lease: unknown subcommand %q\n\n%s", sub, leaseUsage)
		return exitUsage
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fenceproxy lease %s: %s\n", sub, fmt.Sprintf(format, a...))
		return exitUsage
	}
	var name string
	switch {
	case wantName && len(pos) != 1:
		return usageErr("want exactly one lease NAME, got %d arguments", len(pos))
	case !wantName && len(pos) != 0:
		return usageErr("unexpected argument %q", pos[0])
	case wantName:
		name = pos[0]
		if err := lease.ValidateName(name); err != nil {
			return usageErr("%v", err)
		}
	}
	if err := lease.ValidateTable(lf.table); err != nil {
		return usageErr("%v", err)
	}
	if owner == "" && (sub != "show" && sub != "list") {
		owner = os.Getenv(envOwner)
	}
	if owner != "" {
		if err := lease.ValidateOwner(owner); err != nil {
			return usageErr("%v", err)
		}
	}
	if needsOwnerToken {
		if owner == "" {
			return usageErr("--owner (or $%s) is required", envOwner)
		}
		if token == 0 {
			return usageErr("--token is required (fence tokens start at 1)")
		}
	}
	var ttl time.Duration
	if needsTTL {
		if ttlText == "" {
			return usageErr("--ttl is required")
		}
		if ttl, err = parseTTL(ttlText); err != nil {
			return usageErr("%v", err)
		}
	}

	db, code := openDB(&lf, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	store, err := lease.NewStore(db, lf.table)
	if err != nil {
		return usageErr("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lf.timeout)
	defer cancel()
	out := output{stdout: stdout, stderr: stderr, json: lf.json, showOwner: showOwner}

	switch sub {
	case "acquire":
		var opts []lease.AcquireOption
		if owner != "" {
			opts = append(opts, lease.WithOwner(owner))
		}
		l, err := store.Acquire(ctx, name, ttl, opts...)
		if err != nil {
			return out.failure(ctx, store, name, err)
		}
		return out.lease("acquired", l, ttl, true)
	case "renew":
		l, err := store.Renew(ctx, lease.Lease{Name: name, Owner: owner, Token: token}, ttl)
		if err != nil {
			return out.failure(ctx, store, name, err)
		}
		return out.lease("renewed", l, ttl, false)
	case "release":
		if err := store.Release(ctx, lease.Lease{Name: name, Owner: owner, Token: token}); err != nil {
			return out.failure(ctx, store, name, err)
		}
		if out.json {
			writeJSON(stdout, map[string]any{"name": name, "token": token, "released": true})
		} else {
			fmt.Fprintf(stdout, "released %s at token %d\n", displayName(name), token)
		}
		return exitOK
	case "show":
		st, err := store.Get(ctx, name)
		if err != nil {
			return out.failure(ctx, store, name, err)
		}
		if out.json {
			writeJSON(stdout, out.statusJSON(st))
		} else {
			out.status(st)
		}
		return exitOK
	default: // list
		sts, err := store.List(ctx)
		if err != nil {
			return out.failure(ctx, store, "", err)
		}
		if out.json {
			objs := make([]map[string]any, 0, len(sts))
			for _, st := range sts {
				objs = append(objs, out.statusJSON(st))
			}
			writeJSON(stdout, objs)
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		ownerCol := "OWNER ID"
		if showOwner {
			ownerCol = "OWNER"
		}
		fmt.Fprintf(tw, "NAME\tTOKEN\tSTATE\tUNTIL\t%s\n", ownerCol)
		for _, st := range sts {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", displayName(st.Name), st.Token, state(st),
				st.Until.UTC().Format(timeFormat), out.owner(st.Owner))
		}
		tw.Flush()
		if len(sts) == 0 {
			fmt.Fprintln(stderr, "no leases")
		}
		return exitOK
	}
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

func (o output) lease(verb string, l lease.Lease, ttl time.Duration, withOwner bool) int {
	if o.json {
		m := map[string]any{
			"name": l.Name, "token": l.Token, "owner_id": lease.OwnerHash(l.Owner),
			"until": l.Until.UTC().Format(time.RFC3339Nano), "ttl_seconds": ttl.Seconds(),
		}
		if withOwner {
			m["owner"] = l.Owner
		}
		writeJSON(o.stdout, m)
		return exitOK
	}
	fmt.Fprintf(o.stdout, "%s %s\n", verb, displayName(l.Name))
	fmt.Fprintf(o.stdout, "  token:    %d\n", l.Token)
	if withOwner {
		fmt.Fprintf(o.stdout, "  owner:    %s\n", printableOwner(l.Owner))
		fmt.Fprintf(o.stdout, "            (a secret: renew and release need it; shown elsewhere as owner id %s)\n", lease.OwnerHash(l.Owner))
	} else {
		fmt.Fprintf(o.stdout, "  owner id: %s\n", lease.OwnerHash(l.Owner))
	}
	fmt.Fprintf(o.stdout, "  until:    %s (database time, ttl %v)\n", l.Until.UTC().Format(timeFormat), ttl)
	return exitOK
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
		return "held, expires in " + st.Remaining.Round(time.Millisecond).String()
	}
	return "expired " + (-st.Remaining).Round(time.Millisecond).String() + " ago"
}

// failure reports err with its exit code. For a held lease it also shows the
// current holder (owner id only).
func (o output) failure(ctx context.Context, store *lease.Store, name string, err error) int {
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
	fmt.Fprintf(o.stderr, "fenceproxy lease: %s\n", strings.TrimPrefix(err.Error(), "lease: "))
	var cur *lease.Status
	if kind == "held" {
		if st, gerr := store.Get(ctx, name); gerr == nil {
			cur = &st
			if !o.json {
				fmt.Fprintf(o.stderr, "  holder: owner id %s, token %d, %s\n", lease.OwnerHash(st.Owner), st.Token, state(st))
			}
		}
	}
	if o.json {
		m := map[string]any{"error": kind, "message": err.Error()}
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
	return code
}

// displayName prints a lease name as is, or quoted if it has characters that
// would garble a terminal.
func displayName(name string) string {
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
