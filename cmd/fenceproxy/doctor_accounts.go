package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// doctor's check of the accounts: which can get around the fence, at any
// grant level (global, schema, table, column), directly or through a role.
// Two kinds of privilege do:
//
//   - writing the lease table: INSERT, UPDATE, DELETE (and, on the table
//     itself, ALTER, DROP, TRIGGER): such an account can forge a lease and
//     make a stale writer's fence hold;
//   - creating objects that write protected tables where the proxy does not
//     see the statement: TRIGGER, ALTER, CREATE VIEW, CREATE ROUTINE, EVENT,
//     DROP on a protected schema (or one of its tables), SUPER.
//
// Accounts that cannot log in (locked, every authentication method
// invalid: mariadb.sys, MySQL's mysql.sys) are not findings. Roles are
// expanded to the accounts that hold them (directly or through other
// roles), whether the role is their default or one they can SET ROLE to.
// Trusted accounts (doctor.trusted_accounts, --trust) and the proxy's own
// account (backend.user) are listed as information.

// leaseWritePrivs and objectPrivs are the privileges above, by level.
var (
	leaseWritePrivs      = []string{"INSERT", "UPDATE", "DELETE"}
	leaseTableOnlyPrivs  = []string{"ALTER", "DROP", "TRIGGER"}
	objectPrivs          = []string{"TRIGGER", "ALTER", "CREATE VIEW", "CREATE ROUTINE", "EVENT", "DROP"}
	objectTablePrivs     = []string{"TRIGGER", "ALTER", "CREATE VIEW", "DROP"}
	globalOnlyObjectPriv = []string{"SUPER"}
)

// privGrant is one privilege an account has somewhere.
type privGrant struct {
	grantee string // as information_schema spells it: 'user'@'host' ('role'@'' for a MariaDB role)
	priv    string
	on      string // *.*, app.*, app.t, app.t (column c)
	kind    string // "lease" or "objects"
	target  string // the lease table, or the protected schema
}

// accountInfo is what the grant tables say of an account.
type accountInfo struct {
	user, host  string
	role        bool
	noLogin     string   // why it cannot log in ("" = it can)
	defaultRole string   // MariaDB's default role
	roles       []string // grantees of the roles granted to it
}

// accountInput is what doctorAccounts needs to know of the deployment.
type accountInput struct {
	pol     *policy.Policy
	trusted []string // doctor.trusted_accounts and --trust, as written
	proxy   string   // backend.user: the proxy's own account ("" none)
}

func doctorAccounts(ctx context.Context, db *sql.DB, in accountInput, info, find func(string, ...any)) error {
	prot := rewrite.ProtectedFor(in.pol)
	var leaseTables [][2]string
	schemas := map[string]bool{}
	for _, p := range prot {
		schemas[p.Schema] = true // lease tables' schemas too
		if p.LeaseTable {
			leaseTables = append(leaseTables, [2]string{p.Schema, p.Table})
		}
	}
	if len(prot) == 0 {
		return nil
	}
	var me string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&me); err != nil {
		return err
	}
	meGrantee := granteeOfAccount(me)

	// What this account can read of the grant tables decides what can be
	// checked: information_schema shows another account's privileges only
	// to one that may read the table holding them.
	unreadable := map[string]bool{}
	for _, t := range []string{"mysql.user", "mysql.db", "mysql.tables_priv", "mysql.columns_priv"} {
		if _, err := db.ExecContext(ctx, "SELECT 1 FROM "+t+" LIMIT 0"); err != nil {
			unreadable[t] = true
		}
	}
	accounts, rolesRead, err := readAccounts(ctx, db)
	if err != nil {
		return err
	}
	if !rolesRead {
		unreadable["the role tables (mysql.roles_mapping, mysql.role_edges)"] = true
	}
	if len(unreadable) > 0 {
		var names []string
		for n := range unreadable {
			names = append(names, n)
		}
		sort.Strings(names)
		find("privilege: %s cannot read %s, so the privileges of other accounts were not checked there "+
			"(global ones: mysql.user; schema: mysql.db; table: mysql.tables_priv; column: mysql.columns_priv; roles and their holders: the role tables); "+
			"no account that can write the lease table or create triggers, views, routines or events in a protected schema was looked for there. "+
			"Run doctor as an account that can read them (--dsn; GRANT SELECT ON mysql.* TO ...)", me, strings.Join(names, ", "))
	}

	var grants []privGrant
	add := func(kind, target, on string) func(g, p string) {
		return func(g, p string) {
			grants = append(grants, privGrant{grantee: g, priv: p, on: on, kind: kind, target: target})
		}
	}
	inList := func(list []string) string { return "('" + strings.Join(list, "', '") + "')" }
	global := map[string][]string{}
	err = each(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES
		WHERE PRIVILEGE_TYPE IN `+inList(append(append(append([]string{}, leaseWritePrivs...), objectPrivs...), globalOnlyObjectPriv...)),
		func(g, p string) { global[g] = append(global[g], p) })
	if err != nil {
		return fmt.Errorf("reading information_schema.USER_PRIVILEGES: %w", err)
	}
	for g, ps := range global {
		for _, p := range ps {
			for _, lt := range leaseTables {
				if contains(leaseWritePrivs, p) {
					add("lease", lt[0]+"."+lt[1], "*.*")(g, p)
				}
			}
			if contains(objectPrivs, p) || contains(globalOnlyObjectPriv, p) {
				add("objects", "every schema", "*.*")(g, p)
			}
		}
	}
	for _, lt := range leaseTables {
		name := lt[0] + "." + lt[1]
		// Schema grants may be patterns (app\_%.*, app_db.* matching appXdb).
		err = each2(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE, TABLE_SCHEMA FROM information_schema.SCHEMA_PRIVILEGES
			WHERE ? LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE IN `+inList(leaseWritePrivs), func(g, p, s string) {
			add("lease", name, s+".*")(g, p)
		}, lt[0])
		if err != nil {
			return fmt.Errorf("reading information_schema.SCHEMA_PRIVILEGES: %w", err)
		}
		err = each(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND PRIVILEGE_TYPE IN `+inList(append(append([]string{}, leaseWritePrivs...), leaseTableOnlyPrivs...)),
			add("lease", name, name), lt[0], lt[1])
		if err != nil {
			return fmt.Errorf("reading information_schema.TABLE_PRIVILEGES: %w", err)
		}
		err = each2(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE, COLUMN_NAME FROM information_schema.COLUMN_PRIVILEGES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND PRIVILEGE_TYPE IN ('INSERT', 'UPDATE')`, func(g, p, c string) {
			add("lease", name, name+" (column "+c+")")(g, p)
		}, lt[0], lt[1])
		if err != nil {
			return fmt.Errorf("reading information_schema.COLUMN_PRIVILEGES: %w", err)
		}
	}
	for s := range schemas {
		err = each2(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE, TABLE_SCHEMA FROM information_schema.SCHEMA_PRIVILEGES
			WHERE ? LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE IN `+inList(objectPrivs), func(g, p, pat string) {
			add("objects", s, pat+".*")(g, p)
		}, s)
		if err != nil {
			return fmt.Errorf("reading information_schema.SCHEMA_PRIVILEGES: %w", err)
		}
		err = each2(ctx, db, `SELECT GRANTEE, PRIVILEGE_TYPE, TABLE_NAME FROM information_schema.TABLE_PRIVILEGES
			WHERE TABLE_SCHEMA = ? AND PRIVILEGE_TYPE IN `+inList(objectTablePrivs), func(g, p, t string) {
			add("objects", s, s+"."+t)(g, p)
		}, s)
		if err != nil {
			return fmt.Errorf("reading information_schema.TABLE_PRIVILEGES: %w", err)
		}
	}

	// The grant tables themselves, read as well: TiDB leaves
	// information_schema's SCHEMA_PRIVILEGES and TABLE_PRIVILEGES empty
	// (measured), and a privilege seen twice is reported once.
	grants = append(grants, grantTables(ctx, db, leaseTables, schemas)...)

	// Roles: each grant of a role goes to every account that holds it.
	byGrantee := map[string]*accountInfo{}
	for i := range accounts {
		a := &accounts[i]
		byGrantee[quoteAccount(a.user, a.host)] = a
	}
	holders := roleHolders(accounts)

	// grantee -> kind+target -> where (level and how) -> privileges
	perAccount := map[string]map[string]map[string][]string{}
	noted := map[[4]string]bool{} // one item per privilege and level, however many roles lead to it
	note := func(grantee, key, where, on, priv string) {
		if noted[[4]string{grantee, key, on, priv}] {
			return
		}
		noted[[4]string{grantee, key, on, priv}] = true
		if perAccount[grantee] == nil {
			perAccount[grantee] = map[string]map[string][]string{}
		}
		if perAccount[grantee][key] == nil {
			perAccount[grantee][key] = map[string][]string{}
		}
		if !contains(perAccount[grantee][key][where], priv) {
			perAccount[grantee][key][where] = append(perAccount[grantee][key][where], priv)
		}
	}
	for _, g := range grants {
		key := g.kind + "\x00" + g.target
		a := byGrantee[g.grantee]
		if a != nil && a.role {
			for _, h := range holders[g.grantee] {
				how := "through role " + a.user
				if h.viaDefault {
					how += ", its default role"
				} else {
					how += ", which it can SET ROLE to"
				}
				if h.via != a.user {
					how += ", granted through " + h.via
				}
				note(h.grantee, key, g.on+" ("+how+")", g.on, g.priv)
			}
			if len(holders[g.grantee]) == 0 {
				info("privilege: role %s has %s on %s, and no account holds it", a.user, g.priv, g.on)
			}
			continue
		}
		note(g.grantee, key, g.on, g.on, g.priv)
	}
	render := func(m map[string][]string) string {
		wheres := make([]string, 0, len(m))
		for w := range m {
			wheres = append(wheres, w)
		}
		sort.Strings(wheres)
		parts := make([]string, 0, len(wheres))
		for _, w := range wheres {
			ps := m[w]
			sort.Strings(ps)
			parts = append(parts, strings.Join(ps, ", ")+" on "+w)
		}
		return strings.Join(parts, "; ")
	}

	var names []string
	for g := range perAccount {
		names = append(names, g)
	}
	sort.Strings(names)
	var skipped, trustedSeen []string
	for _, g := range names {
		a := byGrantee[g]
		switch {
		case g == meGrantee:
			trustedSeen = append(trustedSeen, g+" (the account doctor runs as)")
			continue
		case a != nil && a.noLogin != "":
			skipped = append(skipped, g+" ("+a.noLogin+")")
			continue
		}
		why := ""
		if t := trustedBy(g, in); t != "" {
			why = t
		}
		keys := make([]string, 0, len(perAccount[g]))
		for k := range perAccount[g] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			kind, target, _ := strings.Cut(k, "\x00")
			items := render(perAccount[g][k])
			var line string
			if kind == "lease" {
				line = fmt.Sprintf("privilege: %s can write the lease table %s: %s; it can forge a lease so that a stale writer's fence holds", g, target, items)
			} else {
				line = fmt.Sprintf("privilege: %s can create objects that write protected tables unfenced (in %s): %s", g, target, items)
			}
			if why != "" {
				info("%s (trusted: %s)", line, why)
			} else {
				find("%s", line)
			}
		}
		if why != "" {
			trustedSeen = append(trustedSeen, g)
		}
	}
	if len(skipped) > 0 {
		info("privilege: not findings, these accounts cannot log in: %s", strings.Join(skipped, ", "))
	}
	if len(trustedSeen) > 0 {
		info("privilege: trusted, privileges listed as information: %s", strings.Join(trustedSeen, ", "))
	}
	return nil
}

// privColumns are the mysql.user and mysql.db columns of the privileges
// doctor looks for.
var privColumns = map[string]string{
	"INSERT": "Insert_priv", "UPDATE": "Update_priv", "DELETE": "Delete_priv", "DROP": "Drop_priv",
	"ALTER": "Alter_priv", "CREATE VIEW": "Create_view_priv", "CREATE ROUTINE": "Create_routine_priv",
	"EVENT": "Event_priv", "TRIGGER": "Trigger_priv", "SUPER": "Super_priv",
}

// grantTables reads the privileges doctor looks for from mysql.user,
// mysql.db, mysql.tables_priv and mysql.columns_priv (the same columns on
// MariaDB, MySQL and TiDB). A table that cannot be read gives nothing
// (doctorAccounts says so).
func grantTables(ctx context.Context, db *sql.DB, leaseTables [][2]string, schemas map[string]bool) []privGrant {
	var out []privGrant
	yes := func(v sql.NullString) bool { return strings.EqualFold(v.String, "Y") }
	level := func(q string, privs []string, args []any, f func(g string, p string, extra string)) {
		cols := make([]string, len(privs))
		for i, p := range privs {
			cols[i] = privColumns[p]
		}
		rows, err := db.QueryContext(ctx, strings.ReplaceAll(q, "COLS", strings.Join(cols, ", ")), args...)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var user, host, extra string
			vals := make([]sql.NullString, len(privs))
			dest := []any{&user, &host, &extra}
			for i := range vals {
				dest = append(dest, &vals[i])
			}
			if rows.Scan(dest...) != nil {
				return
			}
			for i, p := range privs {
				if yes(vals[i]) {
					f(quoteAccount(user, host), p, extra)
				}
			}
		}
	}
	globalPrivs := append(append(append([]string{}, leaseWritePrivs...), objectPrivs...), globalOnlyObjectPriv...)
	level("SELECT User, Host, '', COLS FROM mysql.user", globalPrivs, nil, func(g, p, _ string) {
		if contains(leaseWritePrivs, p) {
			for _, lt := range leaseTables {
				out = append(out, privGrant{grantee: g, priv: p, on: "*.*", kind: "lease", target: lt[0] + "." + lt[1]})
			}
		}
		if contains(objectPrivs, p) || contains(globalOnlyObjectPriv, p) {
			out = append(out, privGrant{grantee: g, priv: p, on: "*.*", kind: "objects", target: "every schema"})
		}
	})
	for _, lt := range leaseTables {
		name := lt[0] + "." + lt[1]
		level("SELECT User, Host, Db, COLS FROM mysql.db WHERE ? LIKE Db", leaseWritePrivs, []any{lt[0]}, func(g, p, pat string) {
			out = append(out, privGrant{grantee: g, priv: p, on: pat + ".*", kind: "lease", target: name})
		})
	}
	for s := range schemas {
		level("SELECT User, Host, Db, COLS FROM mysql.db WHERE ? LIKE Db", objectPrivs, []any{s}, func(g, p, pat string) {
			out = append(out, privGrant{grantee: g, priv: p, on: pat + ".*", kind: "objects", target: s})
		})
	}
	// Table and column privileges are SETs ('Select,Insert,Update,...').
	set := func(q string, args []any, f func(g, name, privs string)) {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var user, host, name, privs string
			if rows.Scan(&user, &host, &name, &privs) != nil {
				return
			}
			f(quoteAccount(user, host), name, privs)
		}
	}
	has := func(privs, p string) bool {
		for _, x := range strings.Split(privs, ",") {
			if strings.EqualFold(strings.TrimSpace(x), p) {
				return true
			}
		}
		return false
	}
	for _, lt := range leaseTables {
		name := lt[0] + "." + lt[1]
		set("SELECT User, Host, Table_name, Table_priv FROM mysql.tables_priv WHERE Db = ? AND Table_name = ?", []any{lt[0], lt[1]}, func(g, _, privs string) {
			for _, p := range append(append([]string{}, leaseWritePrivs...), leaseTableOnlyPrivs...) {
				if has(privs, p) {
					out = append(out, privGrant{grantee: g, priv: p, on: name, kind: "lease", target: name})
				}
			}
		})
		set("SELECT User, Host, Column_name, Column_priv FROM mysql.columns_priv WHERE Db = ? AND Table_name = ?", []any{lt[0], lt[1]}, func(g, col, privs string) {
			for _, p := range []string{"INSERT", "UPDATE"} {
				if has(privs, p) {
					out = append(out, privGrant{grantee: g, priv: p, on: name + " (column " + col + ")", kind: "lease", target: name})
				}
			}
		})
	}
	for s := range schemas {
		set("SELECT User, Host, Table_name, Table_priv FROM mysql.tables_priv WHERE Db = ?", []any{s}, func(g, table, privs string) {
			for _, p := range objectTablePrivs {
				if has(privs, p) {
					out = append(out, privGrant{grantee: g, priv: p, on: s + "." + table, kind: "objects", target: s})
				}
			}
		})
	}
	return out
}

// trustedBy says why grantee is trusted ("" = it is not): it is listed in
// doctor.trusted_accounts or --trust (user@host, or a bare user at any
// host), or it is the proxy's own account.
func trustedBy(grantee string, in accountInput) string {
	user, host := splitGrantee(grantee)
	for _, s := range in.trusted {
		a, err := policy.ParseAccount(s)
		if err != nil {
			continue
		}
		if a.User == user && (a.Host == "" || a.Host == host) {
			return "doctor.trusted_accounts or --trust " + s
		}
	}
	if in.proxy != "" && user == in.proxy {
		return "the proxy's own account (backend.user)"
	}
	return ""
}

// readAccounts reads every account's state from the grant tables:
// MariaDB's mysql.global_priv, else (MySQL 8, TiDB) mysql.user; roles from
// mysql.roles_mapping (MariaDB) or mysql.role_edges. rolesRead: the role
// tables could be read. An account list that cannot be read is empty.
func readAccounts(ctx context.Context, db *sql.DB) (accounts []accountInfo, rolesRead bool, err error) {
	rows, qerr := db.QueryContext(ctx, "SELECT User, Host, Priv FROM mysql.global_priv")
	if qerr == nil {
		for rows.Next() {
			var a accountInfo
			var priv string
			if err := rows.Scan(&a.user, &a.host, &priv); err != nil {
				rows.Close()
				return nil, false, err
			}
			a.role, a.noLogin, a.defaultRole = mariadbAccount(priv)
			accounts = append(accounts, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
	} else {
		rows, qerr = db.QueryContext(ctx, "SELECT User, Host, account_locked FROM mysql.user")
		if qerr == nil {
			for rows.Next() {
				var a accountInfo
				var locked string
				if err := rows.Scan(&a.user, &a.host, &locked); err != nil {
					rows.Close()
					return nil, false, err
				}
				if strings.EqualFold(locked, "Y") {
					a.noLogin = "locked"
				}
				accounts = append(accounts, a)
			}
			rows.Close()
		}
	}
	byKey := map[[2]string]*accountInfo{}
	for i := range accounts {
		byKey[[2]string{accounts[i].user, accounts[i].host}] = &accounts[i]
	}
	// MariaDB: Role granted to User@Host (Host '' for a role holding a role).
	if err := each3(ctx, db, "SELECT User, Host, Role FROM mysql.roles_mapping", func(u, h, r string) {
		if a := byKey[[2]string{u, h}]; a != nil {
			a.roles = append(a.roles, quoteAccount(r, ""))
		}
		if role := byKey[[2]string{r, ""}]; role != nil {
			role.role = true
		}
	}); err == nil {
		return accounts, true, nil
	}
	// MySQL 8, TiDB: FROM_USER@FROM_HOST granted to TO_USER@TO_HOST; roles are
	// accounts; default roles in mysql.default_roles.
	if err := each4(ctx, db, "SELECT FROM_USER, FROM_HOST, TO_USER, TO_HOST FROM mysql.role_edges", func(fu, fh, tu, th string) {
		if a := byKey[[2]string{tu, th}]; a != nil {
			a.roles = append(a.roles, quoteAccount(fu, fh))
		}
		if role := byKey[[2]string{fu, fh}]; role != nil {
			role.role = true
		}
	}); err == nil {
		each4(ctx, db, "SELECT USER, HOST, DEFAULT_ROLE_USER, DEFAULT_ROLE_HOST FROM mysql.default_roles", func(u, h, ru, _ string) {
			if a := byKey[[2]string{u, h}]; a != nil {
				a.defaultRole = ru
			}
		})
		return accounts, true, nil
	}
	return accounts, false, nil
}

// mariadbAccount reads a mysql.global_priv Priv document: whether it is a
// role, why it cannot log in (locked; every authentication method
// invalid), and its default role.
func mariadbAccount(priv string) (role bool, noLogin, defaultRole string) {
	var p struct {
		IsRole      bool   `json:"is_role"`
		Locked      bool   `json:"account_locked"`
		Plugin      string `json:"plugin"`
		AuthString  string `json:"authentication_string"`
		DefaultRole string `json:"default_role"`
		AuthOr      []struct {
			Plugin     string `json:"plugin"`
			AuthString string `json:"authentication_string"`
		} `json:"auth_or"`
	}
	if err := json.Unmarshal([]byte(priv), &p); err != nil {
		return false, "", "" // unknown: counted as an account that can log in
	}
	if p.IsRole {
		return true, "a role", p.DefaultRole
	}
	if p.Locked {
		return false, "locked", p.DefaultRole
	}
	invalid := func(plugin, auth string) bool {
		return (plugin == "" || plugin == "mysql_native_password" || plugin == "mysql_old_password") && auth == "invalid"
	}
	methods := 0
	valid := false
	if len(p.AuthOr) == 0 {
		methods, valid = 1, !invalid(p.Plugin, p.AuthString)
	}
	for _, m := range p.AuthOr {
		methods++
		if m.Plugin == "" && m.AuthString == "" {
			// {} stands for the account's main method.
			if !invalid(p.Plugin, p.AuthString) {
				valid = true
			}
			continue
		}
		if !invalid(m.Plugin, m.AuthString) {
			valid = true
		}
	}
	if methods > 0 && !valid {
		return false, "no valid authentication method", p.DefaultRole
	}
	return false, "", p.DefaultRole
}

// holder is an account that holds a role, directly or through roles.
type holder struct {
	grantee    string
	via        string // the role granted to it that leads here
	viaDefault bool   // that role is its default role (active at login)
}

// roleHolders maps each role's grantee to the accounts (not roles) that
// hold it, following roles granted to roles.
func roleHolders(accounts []accountInfo) map[string][]holder {
	out := map[string][]holder{}
	byGrantee := map[string]*accountInfo{}
	for i := range accounts {
		byGrantee[quoteAccount(accounts[i].user, accounts[i].host)] = &accounts[i]
	}
	for i := range accounts {
		a := &accounts[i]
		if a.role {
			continue
		}
		me := quoteAccount(a.user, a.host)
		for _, direct := range a.roles {
			r := byGrantee[direct]
			name := direct
			if r != nil {
				name = r.user
			}
			isDefault := a.defaultRole != "" && a.defaultRole == name
			seen := map[string]bool{}
			stack := []string{direct}
			for len(stack) > 0 {
				g := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if seen[g] {
					continue
				}
				seen[g] = true
				out[g] = append(out[g], holder{grantee: me, via: name, viaDefault: isDefault})
				if r := byGrantee[g]; r != nil {
					stack = append(stack, r.roles...)
				}
			}
		}
	}
	return out
}

func quoteAccount(user, host string) string {
	return "'" + strings.ReplaceAll(user, "'", "''") + "'@'" + strings.ReplaceAll(host, "'", "''") + "'"
}

// granteeOfAccount turns CURRENT_USER()'s user@host into 'user'@'host'.
func granteeOfAccount(account string) string {
	i := strings.LastIndexByte(account, '@')
	if i < 0 {
		return quoteAccount(account, "")
	}
	return quoteAccount(account[:i], account[i+1:])
}

// splitGrantee reads 'user'@'host'.
func splitGrantee(g string) (user, host string) {
	u, h, _ := strings.Cut(g, "'@'")
	return strings.ReplaceAll(strings.TrimPrefix(u, "'"), "''", "'"), strings.ReplaceAll(strings.TrimSuffix(h, "'"), "''", "'")
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

func each2(ctx context.Context, db *sql.DB, q string, f func(a, b, c string), args ...any) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b, c string
		if err := rows.Scan(&a, &b, &c); err != nil {
			return err
		}
		f(a, b, c)
	}
	return rows.Err()
}

func each3(ctx context.Context, db *sql.DB, q string, f func(a, b, c string)) error {
	return each2(ctx, db, q, f)
}

func each4(ctx context.Context, db *sql.DB, q string, f func(a, b, c, d string)) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b, c, d string
		if err := rows.Scan(&a, &b, &c, &d); err != nil {
			return err
		}
		f(a, b, c, d)
	}
	return rows.Err()
}
