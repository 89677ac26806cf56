package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// init --config FILE: the lease and audit tables of every schema the
// config protects, and with fencing.database_guard: triggers the guard
// triggers of every protected table (lease/trigger.go). Idempotent.

// initReport is what init --config did, for --json.
type initReport struct {
	LeaseTables []string      `json:"lease_tables"`
	AuditTables []string      `json:"audit_tables"`
	Guard       string        `json:"database_guard"`
	Engine      string        `json:"engine,omitempty"`
	Definer     string        `json:"definer,omitempty"`
	Partitioned []string      `json:"partitioned,omitempty"`
	Tables      []guardReport `json:"tables,omitempty"`
	// NotYet: protected tables declared created_later that do not exist
	// yet; init puts their guards on when it runs after they do.
	NotYet []string `json:"not_yet_created,omitempty"`
	// Kept: tables whose guard triggers init left in place because the
	// file does not set database_guard (only an explicit off removes them).
	Kept []string `json:"guards_kept,omitempty"`
}

type guardReport struct {
	Table   string   `json:"table"`
	Created []string `json:"created"`
	Dropped []string `json:"dropped"`
}

// engineName names a lease.Engine for messages.
func engineName(e lease.Engine) string {
	switch e {
	case lease.Galera:
		return "galera"
	case lease.TiDB:
		return "tidb"
	}
	return "innodb"
}

// guardEngine is the engine the guard triggers are built for: backend.engine
// when it names one, else what the server says.
func guardEngine(ctx context.Context, db *sql.DB, cfg *policy.Config) (lease.Engine, error) {
	switch cfg.Backend.Engine {
	case policy.EngineGalera:
		return lease.Galera, nil
	case policy.EngineMariaDB, policy.EngineMySQL:
		return lease.InnoDB, nil
	case policy.EngineTiDB:
		return lease.TiDB, nil
	}
	e, _, err := lease.DetectEngine(ctx, db)
	return e, err
}

// leaseTables lists the lease tables of a config's protected tables, each
// once, as schema.table.
func leaseTables(pol *policy.Policy) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range pol.Tables {
		s, n := pol.LeaseTableFor(t.Schema)
		k := strings.ToLower(s + "." + n)
		if !seen[k] {
			seen[k] = true
			out = append(out, s+"."+n)
		}
	}
	return out
}

func initFromConfig(ctx context.Context, db *sql.DB, cfg *policy.Config) (*initReport, error) {
	pol := cfg.Policy(1)
	rep := &initReport{Guard: pol.DatabaseGuard}
	if len(pol.Tables) == 0 {
		return nil, fail(exitRefused, "%s protects no tables: nothing to create", cfg.Path)
	}
	for _, lt := range leaseTables(pol) {
		if err := lease.CreateSchema(ctx, db, lt); err != nil {
			return nil, fail(exitDB, "%v", err)
		}
		schema, _, _ := strings.Cut(lt, ".")
		rep.LeaseTables = append(rep.LeaseTables, lt)
		rep.AuditTables = append(rep.AuditTables, schema+"."+lease.AuditTable)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, fail(exitDB, "%v", err)
	}
	defer c.Close()
	absent := map[int]bool{}
	for i, t := range pol.Tables {
		ok, err := lease.BaseTableExists(ctx, c, t.Schema, t.Table)
		if err != nil {
			return nil, fail(exitDB, "%v", err)
		}
		switch {
		case ok || pol.DatabaseGuard != policy.GuardTriggers:
		case t.CreatedLater:
			absent[i] = true
			rep.NotYet = append(rep.NotYet, t.Name)
		default:
			return nil, fail(exitDB, "%s:%d: protected table %s does not exist (or is not a base table): guard triggers cannot be installed on it",
				cfg.Path, t.Line, t.Name)
		}
	}
	if pol.DatabaseGuard != policy.GuardTriggers && !cfg.Sets("fencing.database_guard") {
		// Not set: off by default, but a file that merely leaves the key
		// out (an older one, another copy) must not take the guards off
		// the tables. They stay, and init says so.
		for _, t := range pol.Tables {
			have, err := lease.ReadTriggers(ctx, c, t.Schema, t.Table)
			if err != nil {
				return nil, fail(exitDB, "%v", err)
			}
			for _, tr := range have {
				if lease.IsGuardName(tr.Name) {
					rep.Kept = append(rep.Kept, t.Name)
					break
				}
			}
		}
		return rep, nil
	}
	if pol.DatabaseGuard != policy.GuardTriggers {
		// Off, said so: the guards of this config's tables go (they would
		// go on refusing unfenced writes).
		for _, t := range pol.Tables {
			dropped, err := lease.RemoveGuardTriggers(ctx, c, t.Schema, t.Table)
			if err != nil {
				return nil, fail(exitDB, "%v", err)
			}
			if len(dropped) > 0 {
				rep.Tables = append(rep.Tables, guardReport{Table: t.Name, Created: []string{}, Dropped: dropped})
			}
		}
		return rep, nil
	}
	e, err := guardEngine(ctx, db, cfg)
	if err != nil {
		return nil, fail(exitDB, "%v", err)
	}
	if e == lease.TiDB {
		return nil, fail(exitRefused, "%s: fencing.database_guard: triggers: %v", cfg.Path, strings.TrimPrefix(lease.ErrNoTriggers.Error(), "lease: "))
	}
	rep.Engine = engineName(e)
	if err := c.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&rep.Definer); err != nil {
		return nil, fail(exitDB, "%v", err)
	}
	for _, lt := range rep.LeaseTables {
		schema, table, _ := strings.Cut(lt, ".")
		done, err := lease.PartitionForGuards(ctx, c, schema, table)
		if err != nil {
			code := exitDB
			if errors.Is(err, lease.ErrSchema) {
				code = exitRefused
			}
			return nil, fail(code, "%v", err)
		}
		if done {
			rep.Partitioned = append(rep.Partitioned, lt)
		}
	}
	for i, spec := range pol.GuardSpecs(e) {
		if absent[i] {
			continue
		}
		res, err := lease.InstallGuardTriggers(ctx, c, spec)
		if err != nil {
			return nil, fail(exitDB, "%v", err)
		}
		rep.Tables = append(rep.Tables, guardReport{Table: res.Table, Created: orEmpty(res.Created), Dropped: orEmpty(res.Dropped)})
	}
	return rep, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (rep *initReport) print(w io.Writer) {
	for i, lt := range rep.LeaseTables {
		fmt.Fprintf(w, "ready: lease table %s, audit table %s\n", lt, rep.AuditTables[i])
	}
	for _, lt := range rep.Partitioned {
		fmt.Fprintf(w, "lease table %s: partitioned (PARTITION %s), which guard triggers read so that no temporary table can stand in for it\n",
			lt, lease.GuardPartition)
	}
	for _, t := range rep.Kept {
		fmt.Fprintf(w, "%s: guard triggers left in place: the file does not set fencing.database_guard (off by default); "+
			"set database_guard: triggers to keep them checked, or database_guard: off to remove them\n", t)
	}
	if rep.Guard != policy.GuardTriggers {
		for _, t := range rep.Tables {
			fmt.Fprintf(w, "database_guard is off: removed the guard triggers of %s (%s)\n", t.Table, strings.Join(t.Dropped, ", "))
		}
		return
	}
	fmt.Fprintf(w, "guard triggers (%s, definer %s: they run with its privileges):\n", rep.Engine, rep.Definer)
	for _, t := range rep.Tables {
		switch {
		case len(t.Created) == 0 && len(t.Dropped) == 0:
			fmt.Fprintf(w, "  %s: current\n", t.Table)
		default:
			fmt.Fprintf(w, "  %s: created %s", t.Table, strings.Join(t.Created, ", "))
			if len(t.Dropped) > 0 {
				fmt.Fprintf(w, "; dropped %s", strings.Join(t.Dropped, ", "))
			}
			fmt.Fprintln(w)
		}
	}
	for _, name := range rep.NotYet {
		fmt.Fprintf(w, "  %s: not there yet (created_later); run fenceproxy init --config again once it is created: "+
			"until then writes to it through the proxy are refused and direct ones are not guarded\n", name)
	}
}
