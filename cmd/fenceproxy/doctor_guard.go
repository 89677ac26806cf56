package main

import (
	"context"
	"database/sql"
	"strings"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// doctorGuard is doctor's part on fencing.database_guard: off on an engine
// that has triggers, missing, outdated or misordered guard triggers, the
// lease table's partition, the triggers' definers, and the exempt
// accounts (listed; an anonymous account makes their names claimable).
func doctorGuard(ctx context.Context, db *sql.DB, pol *policy.Policy, info, find func(string, ...any)) error {
	if len(pol.Tables) == 0 {
		return nil
	}
	engine, version, err := lease.DetectEngine(ctx, db)
	if err != nil {
		return err
	}
	if pol.DatabaseGuard != policy.GuardTriggers {
		if engine == lease.TiDB {
			info("database_guard: off (TiDB has no triggers: only writes through the proxy are fenced)")
			return nil
		}
		find("database_guard: off on %s, which has triggers: writes that do not pass through the proxy (direct connections, "+
			"events, cron jobs, migrations) are not fenced; set fencing.database_guard: triggers and run fenceproxy init --config FILE", version)
		for _, t := range pol.Tables {
			have, err := lease.ReadTriggers(ctx, db, t.Schema, t.Table)
			if err != nil {
				return err
			}
			for _, tr := range have {
				if lease.IsGuardName(tr.Name) {
					info("database_guard: off, but %s still has the guard trigger %s (it refuses unfenced writes; fenceproxy init removes it)",
						t.Name, tr.Name)
				}
			}
		}
		return nil
	}
	if engine == lease.TiDB {
		find("database_guard: triggers on TiDB, which has no triggers: set it to off")
		return nil
	}
	info("database_guard: triggers (%s bodies)", engineName(engine))
	if len(pol.GuardExempt) == 0 {
		info("database_guard: no exempt accounts")
	}
	for _, a := range pol.GuardExempt {
		info("database_guard: exempt account %s writes without a fence (matched on USER())", a.String())
	}
	if len(pol.GuardExempt) > 0 {
		var anon int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE user = ''").Scan(&anon); err == nil && anon > 0 {
			find("database_guard: %d anonymous account(s) (user '') exist: a client logging in through one can claim any user name, "+
				"an exempt one too (USER() shows the name it gave); drop them", anon)
		} else if err != nil {
			info("database_guard: could not read mysql.user to look for anonymous accounts (%v); an anonymous account makes exempt names claimable", err)
		}
	}
	partitions := map[string]bool{}
	for i, spec := range pol.GuardSpecs(engine) {
		name := spec.Schema + "." + spec.Table
		if pol.Tables[i].CreatedLater {
			ok, err := lease.BaseTableExists(ctx, db, spec.Schema, spec.Table)
			if err != nil {
				return err
			}
			if !ok {
				info("database_guard: %s (created_later) does not exist yet: run fenceproxy init --config FILE once it does", name)
				continue
			}
		}
		lt := spec.Fence.Schema + "." + spec.Fence.Table
		if !partitions[lt] {
			partitions[lt] = true
			problem, err := lease.GuardPartitionProblem(ctx, db, spec.Fence.Schema, spec.Fence.Table)
			if err != nil {
				return err
			}
			if problem != "" {
				find("database_guard: %s; run fenceproxy init --config FILE", problem)
			}
		}
		want, err := lease.GuardTriggers(spec)
		if err != nil {
			return err
		}
		have, err := lease.ReadTriggers(ctx, db, spec.Schema, spec.Table)
		if err != nil {
			return err
		}
		states := lease.CheckGuardTriggers(want, have)
		if missing := lease.Missing(states); missing != "" {
			find("database_guard: %s: guard triggers %s: serve refuses to start (and, running, refuses writes to it); run fenceproxy init --config FILE",
				name, missing)
		}
		for _, st := range states {
			if st.Current != "" && !st.First {
				find("database_guard: %s: another BEFORE %s trigger runs before the guard %s: what it writes to non-transactional tables "+
					"stays when the guard refuses the row; run fenceproxy init --config FILE to put the guard first", name, st.Event, st.Current)
			}
			if st.Current != "" && len(st.Outdated) > 0 {
				find("database_guard: %s: outdated guard triggers %s next to the current one; run fenceproxy init --config FILE to drop them",
					name, strings.Join(st.Outdated, ", "))
			}
		}
		rows, err := db.QueryContext(ctx, "SELECT DISTINCT DEFINER FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? "+
			"AND EVENT_OBJECT_TABLE = ? AND LEFT(TRIGGER_NAME, ?) = ?", spec.Schema, spec.Table, len(lease.GuardTriggerPrefix), lease.GuardTriggerPrefix)
		if err != nil {
			return err
		}
		var definers []string
		for rows.Next() {
			var d string
			if err := rows.Scan(&d); err != nil {
				rows.Close()
				return err
			}
			definers = append(definers, d)
		}
		rows.Close()
		if len(definers) > 0 {
			info("database_guard: %s: guard triggers run as %s (they need SELECT on %s and TRIGGER on the table; "+
				"if that account goes, every write to the table fails with error 1449)", name, strings.Join(definers, ", "), lt)
		}
	}
	return nil
}
