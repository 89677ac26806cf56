package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

func init() {
	subcommands = append(subcommands, newAuditCommand)
}

const auditLong = `audit reads the audit table (fenced_audit, written by the proxies through
backend.user) and prints the matching records, newest last: a table, or with
--json one JSON object a line, with the fields of the audit file.

--since and --until take a duration before now (12h, 30m, 7d) or a time
(2026-11-30T22:00:00Z; "2026-11-30 22:00" and 2026-11-30 are UTC). --table is
schema.table or a bare table name (any schema). The audit table is read from
the DSN's database unless --schema names another.

Exit codes: 0 records found; 1 none matched; 2 usage error; 3 database error
(connection, SQL, no audit table).`

type auditFlags struct {
	lf                   leaseFlags
	since, until         string
	lease, table, reason string
	schema               string
	limit                int
}

func newAuditCommand(stdout, stderr io.Writer) *cobra.Command {
	var af auditFlags
	cmd := &cobra.Command{
		Use:   "audit [--dsn DSN] [--since 12h] [--until T] [--lease L] [--table T] [--reason R] [--json]",
		Short: "Show rejected and refused writes from the audit table",
		Long:  auditLong,
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return runAudit(&af, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&af.lf.dsn, "dsn", "", "database DSN (default $"+envDSN+")")
	f.BoolVar(&af.lf.json, "json", false, "print JSON lines")
	f.DurationVar(&af.lf.timeout, "timeout", 30*time.Second, "bound on the whole operation")
	f.StringVar(&af.since, "since", "24h", "oldest record: a duration before now or a time")
	f.StringVar(&af.until, "until", "", "records before this: a duration before now or a time (default: now)")
	f.StringVar(&af.lease, "lease", "", "only this lease")
	f.StringVar(&af.table, "table", "", "only this protected table (schema.table or table)")
	f.StringVar(&af.reason, "reason", "", "only this reason: "+strings.Join(audit.Reasons, ", "))
	f.StringVar(&af.schema, "schema", "", "schema of the audit table (default: the DSN's database)")
	f.IntVar(&af.limit, "limit", 1000, "at most this many records, the newest")
	return cmd
}

func runAudit(af *auditFlags, stdout, stderr io.Writer) error {
	now := time.Now()
	filter := audit.Filter{Lease: af.lease, Table: af.table, Reason: af.reason}
	var err error
	if af.since != "" {
		if filter.Since, err = audit.ParseTime(af.since, now); err != nil {
			return usageErr("--since: %v", err)
		}
	}
	if af.until != "" {
		if filter.Until, err = audit.ParseTime(af.until, now); err != nil {
			return usageErr("--until: %v", err)
		}
	}
	if err := filter.Check(); err != nil {
		return usageErr("%v", err)
	}
	if af.limit < 1 {
		return usageErr("--limit must be 1 or more")
	}
	table := audit.TableName
	if af.schema != "" {
		if err := lease.ValidateTable(af.schema + "." + table); err != nil {
			return usageErr("--schema: %v", err)
		}
		table = "`" + af.schema + "`." + table
	}
	db, err := openDB(&af.lf)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), af.lf.timeout)
	defer cancel()
	recs, err := queryAudit(ctx, db, table, filter, af.limit)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 {
			return fail(exitDB, "%v (run fenceproxy init there, or give --schema)", err)
		}
		return fail(exitDB, "%v", err)
	}
	if len(recs) == 0 {
		// Said once, by run: "fenceproxy audit: no audit records match".
		return &exitError{code: exitRefused, err: errors.New("no audit records match")}
	}
	if af.lf.json {
		enc := json.NewEncoder(stdout)
		for _, r := range recs {
			enc.Encode(r)
		}
		return nil
	}
	printAuditTable(stdout, recs)
	return nil
}

// queryAudit reads the newest limit records matching f, returned oldest
// first. The session is in UTC (openDB), so times go and come as UTC text.
func queryAudit(ctx context.Context, db *sql.DB, table string, f audit.Filter, limit int) ([]audit.Record, error) {
	const layout = "2006-01-02 15:04:05.000000"
	var where []string
	var args []any
	add := func(cond string, arg any) {
		where = append(where, cond)
		args = append(args, arg)
	}
	if !f.Since.IsZero() {
		add("`time` >= ?", f.Since.UTC().Format(layout))
	}
	if !f.Until.IsZero() {
		add("`time` < ?", f.Until.UTC().Format(layout))
	}
	if f.Lease != "" {
		add("`lease` = ?", f.Lease)
	}
	if f.Reason != "" {
		add("`reason` = ?", f.Reason)
	}
	if f.Table != "" {
		if strings.Contains(f.Table, ".") {
			add("LOWER(`table_name`) = LOWER(?)", f.Table)
		} else {
			add("LOWER(SUBSTRING_INDEX(`table_name`, '.', -1)) = LOWER(?)", f.Table)
		}
	}
	q := "SELECT DATE_FORMAT(`time`, '%Y-%m-%d %H:%i:%s.%f'), `reason`, `mode`, COALESCE(`lease`, ''), `table_name`, " +
		"COALESCE(`presented_owner`, ''), `presented_token`, `current_token`, `client`, `user`, `schema_name`, " +
		"COALESCE(`digest`, ''), `outcome`, COALESCE(`detail`, ''), `instance`, `conn_id`, `backend_conn_id`, `client_host`, `program_name` " +
		"FROM " + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY `time` DESC, `id` DESC LIMIT " + strconv.Itoa(limit)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		var r audit.Record
		var ts string
		var presentedU, currentU sql.Null[uint64]
		if err := rows.Scan(&ts, &r.Reason, &r.Mode, &r.Lease, &r.Table, &r.PresentedOwner, &presentedU, &currentU,
			&r.Client, &r.User, &r.Schema, &r.Digest, &r.Outcome, &r.Detail, &r.Instance, &r.ConnID, &r.BackendConnID,
			&r.ClientHost, &r.Program); err != nil {
			return nil, err
		}
		t, err := time.Parse(layout, ts)
		if err != nil {
			return nil, fmt.Errorf("audit time %q: %w", ts, err)
		}
		r.Time = t.UTC()
		if presentedU.Valid {
			r.PresentedToken = &presentedU.V
		}
		if currentU.Valid {
			r.CurrentToken = &currentU.V
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

func printAuditTable(w io.Writer, recs []audit.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tREASON\tOUTCOME\tMODE\tTABLE\tLEASE\tTOKEN\tUSER\tCLIENT\tPROGRAM\tINSTANCE\tCONN\tSTATEMENT")
	tok := func(p *uint64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatUint(*p, 10)
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return termSafe(s)
	}
	for _, r := range recs {
		stmt := r.Digest
		if r.Detail != "" {
			stmt += " (" + r.Detail + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			r.Time.Format("2006-01-02 15:04:05.000"), dash(r.Reason), dash(r.Outcome), dash(r.Mode), dash(r.Table), dash(r.Lease),
			tok(r.PresentedToken), tok(r.CurrentToken), dash(r.User), dash(r.ClientHost), dash(r.Program), dash(r.Instance),
			r.ConnID, oneLine(dash(stmt), 100))
	}
	tw.Flush()
}

// oneLine keeps a statement on one line of the table (dash escaped its
// line breaks and tabs) and cuts a long one.
func oneLine(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
