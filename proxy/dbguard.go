package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// fencing.database_guard: triggers (lease/trigger.go): guard triggers on
// every protected table check the fence inside the database.
//
//   - At start (New) the proxy reads each protected table's triggers with
//     its own account and refuses to start while one lacks its current
//     guards, naming the table and fenceproxy init.
//   - On every catalog refresh (and reload) it checks them again from the
//     catalog's snapshot: writes to a table whose guards are missing or
//     outdated are refused until they are back
//     (fenceproxy_database_guard_missing says which).
//   - A guard's error coming back (GuardErrno, SQLSTATE 45000) is audited
//     as database_guard, counted, and returned as it is, whatever
//     on_stale says: a trigger cannot skip a row.
//   - Current guard triggers take no part in the catalog's closure: they
//     read the lease table and (on Galera) bump its write counter under
//     the fence, nothing else.

// dbGuard is the proxy's knowledge of the guard triggers; the caller holds
// updateMu.
type dbGuard struct {
	engine lease.Engine
	known  bool // engine was learned
	// direct: the problems found by the last check that read the
	// triggers itself (at start, on a reload), by table key; used while
	// there is no catalog snapshot to check against. partition: what that
	// check found wrong with each table's lease table, which the catalog
	// does not read. checked: the policy version it checked.
	direct    map[string]string
	partition map[string]string
	checked   uint64
}

// guardTimeout bounds the proxy's own reads of the triggers.
const guardTimeout = 10 * time.Second

// tableKey is the key of a protected table in the guard's maps.
func tableKey(schema, table string) string {
	return strings.ToLower(schema) + "." + strings.ToLower(table)
}

// learnGuardEngine settles the engine the guard triggers are built for:
// backend.engine when it names one, else the server's answer.
func (p *Proxy) learnGuardEngine(ctx context.Context, cfg *policy.Config) error {
	if p.guard.known {
		return nil
	}
	switch cfg.Backend.Engine {
	case policy.EngineGalera:
		p.guard.engine = lease.Galera
	case policy.EngineMariaDB, policy.EngineMySQL:
		p.guard.engine = lease.InnoDB
	case policy.EngineTiDB:
		p.guard.engine = lease.TiDB
	default:
		if p.adminDB == nil {
			return fmt.Errorf("fencing.database_guard: triggers needs backend.user to check the guard triggers")
		}
		e, _, err := lease.DetectEngine(ctx, p.adminDB)
		if err != nil {
			return fmt.Errorf("fencing.database_guard: cannot tell which engine the backend is: %w", err)
		}
		p.guard.engine = e
	}
	p.guard.known = true
	return nil
}

// checkGuardsDirect reads every protected table's triggers (and its lease
// table's partition) with the proxy's own account and returns what is
// wrong, by table key.
func (p *Proxy) checkGuardsDirect(cfg *policy.Config, pol *policy.Policy) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	if err := p.learnGuardEngine(ctx, cfg); err != nil {
		return nil, err
	}
	if p.guard.engine == lease.TiDB {
		return nil, fmt.Errorf("fencing.database_guard: triggers: %s", strings.TrimPrefix(lease.ErrNoTriggers.Error(), "lease: "))
	}
	problems := map[string]string{}
	partitions := map[string]string{}
	p.guard.partition = map[string]string{}
	for i, spec := range pol.GuardSpecs(p.guard.engine) {
		if pol.Tables[i].CreatedLater {
			// Not there yet: nothing to guard. Once a migration creates it,
			// the catalog's check (unguarded) finds it without guards.
			ok, err := lease.BaseTableExists(ctx, p.adminDB, spec.Schema, spec.Table)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		want, err := lease.GuardTriggers(spec)
		if err != nil {
			return nil, err
		}
		have, err := lease.ReadTriggers(ctx, p.adminDB, spec.Schema, spec.Table)
		if err != nil {
			return nil, err
		}
		why := lease.Missing(lease.CheckGuardTriggers(want, have))
		lk := tableKey(spec.Fence.Schema, spec.Fence.Table)
		part, seen := partitions[lk]
		if !seen {
			if part, err = lease.GuardPartitionProblem(ctx, p.adminDB, spec.Fence.Schema, spec.Fence.Table); err != nil {
				return nil, err
			}
			partitions[lk] = part
		}
		if part != "" {
			p.guard.partition[tableKey(spec.Schema, spec.Table)] = part
			why = strings.TrimPrefix(why+"; "+part, "; ")
		}
		if why != "" {
			problems[tableKey(spec.Schema, spec.Table)] = why
		}
	}
	return problems, nil
}

// startGuards is New's check: an error when the proxy must not start.
func (p *Proxy) startGuards(cfg *policy.Config, pol *policy.Policy) error {
	if pol.DatabaseGuard != policy.GuardTriggers || len(pol.Tables) == 0 {
		return nil
	}
	problems, err := p.checkGuardsDirect(cfg, pol)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("fencing.database_guard: triggers: %s; install them with: fenceproxy init --config %s",
			describeGuardProblems(pol, problems), cfg.Path)
	}
	p.guard.direct, p.guard.checked = problems, pol.Version
	return nil
}

// reloadGuards is Update's: a reload that turns the guard on, or one
// without a catalog to check against, reads the triggers itself.
func (p *Proxy) reloadGuards(cfg *policy.Config, pol *policy.Policy) {
	if pol.DatabaseGuard != policy.GuardTriggers || len(pol.Tables) == 0 || pol.Version == p.guard.checked ||
		(p.guard.known && p.catalog != nil) {
		return
	}
	problems, err := p.checkGuardsDirect(cfg, pol)
	if err != nil {
		// Unverified: every protected table counts as unguarded.
		problems = map[string]string{}
		for _, t := range pol.Tables {
			problems[tableKey(t.Schema, t.Table)] = "not checked: " + err.Error()
		}
	}
	p.guard.direct, p.guard.checked = problems, pol.Version
}

// recheckGuards is the run-time check without a catalog (catalog.refresh:
// 0s): the catalog's refresh checks the guard triggers from its snapshot,
// and without one they are read again after every successful health check
// (backend.health_interval), so that a guard dropped on the server refuses
// writes to its table and shows in fenceproxy_database_guard_missing while
// the proxy runs, not only at start and on reload. A check that fails
// keeps what the last one found (the backend is down, or slow: writes fail
// or wait anyway).
func (p *Proxy) recheckGuards() {
	if p.catalog != nil || p.adminDB == nil {
		return
	}
	if rt := p.rt.Load(); rt == nil || rt.policy.DatabaseGuard != policy.GuardTriggers {
		return
	}
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	rt := p.rt.Load()
	if rt == nil || rt.policy.DatabaseGuard != policy.GuardTriggers || len(rt.policy.Tables) == 0 {
		return
	}
	problems, err := p.checkGuardsDirect(rt.cfg, rt.policy)
	if err != nil {
		p.logger.Warn("database_guard: could not read the guard triggers again; keeping the last check's result", "err", err)
		return
	}
	if guardFingerprint(problems) == guardFingerprint(p.guard.direct) && len(problems) == len(p.guard.direct) {
		p.guard.direct = problems
		return
	}
	if len(problems) > 0 {
		p.logger.Error("database_guard: guard triggers are missing or outdated: writes to these tables through the proxy are refused until fenceproxy init --config puts them back",
			"tables", describeGuardProblems(rt.policy, problems))
	} else {
		p.logger.Info("database_guard: every protected table has its guard triggers again")
	}
	p.guard.direct = problems
	p.install(rt.cfg, rt.policy)
}

func describeGuardProblems(pol *policy.Policy, problems map[string]string) string {
	var parts []string
	for _, t := range pol.Tables {
		if why, bad := problems[tableKey(t.Schema, t.Table)]; bad {
			parts = append(parts, t.Name+" ("+why+")")
		}
	}
	return "the guard triggers of " + strings.Join(parts, ", ") + " are missing or outdated"
}

// unguarded returns the protected tables whose guard triggers are not
// current, by table key, from the catalog's snapshot when there is one.
func (p *Proxy) unguarded(pol *policy.Policy) map[string]string {
	if pol.DatabaseGuard != policy.GuardTriggers {
		return nil
	}
	st := p.catState.Load()
	if st == nil || st.Snapshot == nil || !p.guard.known {
		return p.guard.direct
	}
	byTable := map[string][]lease.InstalledTrigger{}
	for _, t := range st.Snapshot.Triggers {
		k := tableKey(t.Schema, t.Table)
		byTable[k] = append(byTable[k], installedOf(t)...)
	}
	var exists map[string]bool
	problems := map[string]string{}
	for i, spec := range pol.GuardSpecs(p.guard.engine) {
		k := tableKey(spec.Schema, spec.Table)
		if pol.Tables[i].CreatedLater {
			// A created_later table the catalog has not seen yet has no
			// rows to guard; from the read that sees it, it needs its
			// guards like any other.
			if exists == nil {
				exists = make(map[string]bool, len(st.Snapshot.Tables))
				for _, n := range st.Snapshot.Tables {
					exists[tableKey(n.Schema, n.Name)] = true
				}
			}
			if !exists[k] {
				continue
			}
		}
		want, err := lease.GuardTriggers(spec)
		if err != nil {
			problems[k] = err.Error()
			continue
		}
		if why := lease.Missing(lease.CheckGuardTriggers(want, byTable[k])); why != "" {
			problems[k] = why
		}
	}
	// What only the direct check reads (the lease table's partition)
	// stays as it found it.
	for k, why := range p.guard.partition {
		problems[k] = strings.TrimPrefix(problems[k]+"; "+why, "; ")
	}
	return problems
}

// installedOf turns a catalog trigger into the lease package's view, one
// per event.
func installedOf(t catalog.Trigger) []lease.InstalledTrigger {
	var out []lease.InstalledTrigger
	for _, ev := range []catalog.Op{catalog.OpInsert, catalog.OpUpdate, catalog.OpDelete} {
		if t.Event&ev != 0 {
			out = append(out, lease.InstalledTrigger{Name: t.Name, Event: ev.String(), Timing: t.Timing, Body: t.Body, SQLMode: t.SQLMode})
		}
	}
	return out
}

// setGuardMetric publishes which protected tables lack their guards.
func (p *Proxy) setGuardMetric(pol *policy.Policy, problems map[string]string) {
	g := p.metrics.DatabaseGuardMissing
	g.Reset()
	if pol.DatabaseGuard != policy.GuardTriggers {
		return
	}
	for _, t := range pol.Tables {
		v := 0.0
		if _, bad := problems[tableKey(t.Schema, t.Table)]; bad {
			v = 1
		}
		g.WithLabelValues(t.Schema + "." + t.Table).Set(v)
	}
}

// guardFingerprint: prepared statements are decided again when the set of
// unguarded tables changes.
func guardFingerprint(problems map[string]string) string {
	if len(problems) == 0 {
		return ""
	}
	keys := make([]string, 0, len(problems))
	for k := range problems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return "|unguarded=" + strings.Join(keys, ",")
}

// withoutGuardTriggers is snap without the triggers that are a protected
// table's guard (their exact bodies, for either engine): the catalog does
// not count them as writing anything.
func withoutGuardTriggers(snap *catalog.Snapshot, pol *policy.Policy) *catalog.Snapshot {
	if snap == nil || len(pol.Tables) == 0 {
		return snap
	}
	bodies := map[string]bool{}
	for _, e := range []lease.Engine{lease.InnoDB, lease.Galera} {
		for _, spec := range pol.GuardSpecs(e) {
			if gs, err := lease.GuardTriggers(spec); err == nil {
				bodies[tableKey(spec.Schema, spec.Table)+"\x00"+gs[0].Body] = true
			}
		}
	}
	var keep []catalog.Trigger
	dropped := false
	for _, t := range snap.Triggers {
		if lease.IsGuardName(t.Name) && bodies[tableKey(t.Schema, t.Table)+"\x00"+t.Body] {
			dropped = true
			continue
		}
		keep = append(keep, t)
	}
	if !dropped {
		return snap
	}
	out := *snap
	out.Triggers = keep
	return &out
}

// WithoutGuardTriggers is withoutGuardTriggers for doctor.
func WithoutGuardTriggers(snap *catalog.Snapshot, pol *policy.Policy) *catalog.Snapshot {
	return withoutGuardTriggers(snap, pol)
}

// unguardedRefusal refuses a decision that writes a protected table whose
// guard triggers are missing or outdated.
func (c *clientConn) unguardedRefusal(rt *runtime, d rewrite.Decision) rewrite.Decision {
	if len(rt.unguarded) == 0 || d.Action == rewrite.Refuse || d.Action == rewrite.Answer {
		return d
	}
	for i := range d.Stmts {
		st := &d.Stmts[i]
		fences := []*rewrite.Fence{st.Fence}
		if st.Prepared != nil {
			fences = append(fences, st.Prepared.Fence)
		}
		if st.Kind == rewrite.Execute {
			if ps := c.named[st.Name]; ps != nil {
				fences = append(fences, ps.stmt.Fence)
			}
		}
		for _, f := range fences {
			if f == nil {
				continue
			}
			for _, tg := range f.Targets {
				if why, bad := rt.unguarded[tableKey(tg.Schema, tg.Table)]; bad {
					return rewrite.Decision{Action: rewrite.Refuse, Refusal: &rewrite.Refusal{Table: tg.Schema + "." + tg.Table,
						Reason: "its guard triggers are missing or outdated (" + why + "), so writes to it are refused until they are " +
							"back: run fenceproxy init --config FILE against the database"}}
				}
			}
		}
	}
	return d
}

// CheckDatabaseGuard is serve's start-up check of the guard triggers, over
// db (the proxy's own account), for check-config --connect: nil when serve
// would start.
func CheckDatabaseGuard(cfg *policy.Config, db *sql.DB) error {
	p := &Proxy{adminDB: db}
	return p.startGuards(cfg, cfg.Policy(1))
}
