package catalog

import (
	"strings"
	"testing"
)

// The protected tables of every case: app.jobs on the session's lease,
// app.ledger on the fixed lease "billing", and the lease table.
var testProt = []Protected{
	{Schema: "app", Table: "jobs"},
	{Schema: "app", Table: "ledger", Lease: "billing"},
	{Schema: "app", Table: "fenced_job_leases", LeaseTable: true},
}

func TestClose(t *testing.T) {
	cases := []struct {
		name string
		snap Snapshot
		want []string
	}{
		{
			name: "empty",
			want: nil,
		},
		{
			name: "view over protected table",
			snap: Snapshot{Views: []View{
				{Schema: "app", Name: "v_jobs", Definition: "select `app`.`jobs`.`id` AS `id` from `app`.`jobs`"},
				{Schema: "app", Name: "v_other", Definition: "select `app`.`t`.`id` AS `id` from `app`.`t`"},
			}},
			want: []string{"fence app.v_jobs (view) INSERT: app.jobs[@]; UPDATE: app.jobs[@]; DELETE: app.jobs[@]"},
		},
		{
			name: "view of view, unqualified names resolve in the view's schema",
			snap: Snapshot{Views: []View{
				{Schema: "app", Name: "v2", Definition: "select id from v1"},
				{Schema: "app", Name: "v1", Definition: "select id from ledger where id > 0"},
			}},
			want: []string{
				"fence app.v1 (view) INSERT: app.ledger[billing]; UPDATE: app.ledger[billing]; DELETE: app.ledger[billing]",
				"fence app.v2 (view) INSERT: app.ledger[billing]; UPDATE: app.ledger[billing]; DELETE: app.ledger[billing]",
			},
		},
		{
			name: "join view over two leases fences with both",
			snap: Snapshot{Views: []View{
				{Schema: "app", Name: "vj", Definition: "select `j`.`id` AS `id` from (`app`.`jobs` `j` join `app`.`ledger` `l` on(`j`.`id` = `l`.`id`))"},
			}},
			want: []string{"fence app.vj (view) INSERT: app.jobs[@] app.ledger[billing]; UPDATE: app.jobs[@] app.ledger[billing]; DELETE: app.jobs[@] app.ledger[billing]"},
		},
		{
			name: "a CTE named like a protected table shadows it",
			snap: Snapshot{Views: []View{
				{Schema: "app", Name: "vc", Definition: "with jobs as (select 1 AS `id`) select `jobs`.`id` AS `id` from jobs"},
			}},
			want: nil,
		},
		{
			name: "unparseable view definition: every name counts",
			snap: Snapshot{Views: []View{
				{Schema: "app", Name: "vx", Definition: "select ??? from jobs"},
			}},
			want: []string{"fence app.vx (view) INSERT: app.jobs[@]; UPDATE: app.jobs[@]; DELETE: app.jobs[@]"},
		},
		{
			name: "trigger writes protected table, only for its event",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "app", Name: "t_ai", Table: "orders", Event: OpInsert, Body: "INSERT INTO jobs (id) VALUES (NEW.id)"},
				{Schema: "app", Name: "t_au", Table: "orders", Event: OpUpdate, Body: "UPDATE audit SET n = n + 1"},
			}},
			want: []string{"fence app.orders (triggers) INSERT: app.jobs[@]"},
		},
		{
			name: "trigger chain through another table's trigger",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "app", Name: "a_ad", Table: "a", Event: OpDelete, Body: "BEGIN\n  DELETE FROM b WHERE id = OLD.id;\nEND"},
				{Schema: "app", Name: "b_ad", Table: "b", Event: OpDelete, Body: "UPDATE app.ledger SET amount = 0 WHERE id = OLD.id"},
			}},
			want: []string{
				"fence app.a (triggers) DELETE: app.ledger[billing]",
				"fence app.b (triggers) DELETE: app.ledger[billing]",
			},
		},
		{
			name: "trigger inside control flow, after a label, in a handler",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "app", Name: "x1", Table: "x", Event: OpInsert, Body: "BEGIN IF NEW.k > 1 THEN SET NEW.k = 2; ELSE DELETE FROM jobs WHERE id = NEW.id; END IF; END"},
				{Schema: "app", Name: "y1", Table: "y", Event: OpInsert, Body: "lbl: BEGIN DECLARE CONTINUE HANDLER FOR SQLEXCEPTION INSERT INTO ledger VALUES (1); SET @a = 1; END lbl"},
				{Schema: "app", Name: "z1", Table: "z", Event: OpInsert, Body: "BEGIN WHILE @i < 3 DO REPLACE INTO jobs VALUES (NEW.id); SET @i = @i + 1; END WHILE; END"},
			}},
			want: []string{
				"fence app.x (triggers) INSERT: app.jobs[@]",
				"fence app.y (triggers) INSERT: app.ledger[billing]",
				"fence app.z (triggers) INSERT: app.jobs[@]",
			},
		},
		{
			name: "reads, string functions and FOR UPDATE do not count as writes",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "app", Name: "r1", Table: "r", Event: OpInsert, Body: "BEGIN SET NEW.s = REPLACE((SELECT name FROM jobs WHERE id = NEW.id FOR UPDATE), 'a', 'b'); SET NEW.t = INSERT(NEW.t, 1, 2, 'x'); INSERT INTO log SELECT id FROM jobs; END"},
			}},
			want: nil,
		},
		{
			name: "strings and comments hide nothing and fake nothing",
			snap: Snapshot{Server: "10.11.19-MariaDB", Triggers: []Trigger{
				{Schema: "app", Name: "c1", Table: "c", Event: OpInsert, Body: "BEGIN SET @x = 'DELETE FROM jobs'; -- DELETE FROM jobs\n /* ; DELETE FROM jobs */ INSERT INTO log VALUES ('; DELETE FROM jobs'); END"},
				{Schema: "app", Name: "d1", Table: "d", Event: OpInsert, Body: "BEGIN /*!50100 DELETE FROM jobs */; END"},
			}},
			want: []string{"fence app.d (triggers) INSERT: app.jobs[@]"},
		},
		{
			name: "trigger calling a procedure that writes, procedure refused",
			snap: Snapshot{
				Triggers: []Trigger{{Schema: "app", Name: "p_ai", Table: "p", Event: OpInsert, Body: "CALL app.touch(NEW.id)"}},
				Routines: []Routine{{Schema: "app", Name: "touch", Body: "BEGIN UPDATE jobs SET n = n + 1 WHERE id = x; END"}},
			},
			want: []string{
				"fence app.p (triggers) INSERT: app.jobs[@]",
				"refuse procedure app.touch writes app.jobs",
			},
		},
		{
			name: "a trigger and a view call routines by accented spellings the server resolves to them",
			snap: Snapshot{
				Triggers: []Trigger{
					{Schema: "app", Name: "q_ai", Table: "q", Event: OpInsert, Body: "SET @x = app.bÜmp(NEW.id)"},
					{Schema: "app", Name: "q_ad", Table: "q", Event: OpDelete, Body: "CALL tóuch()"},
				},
				Views: []View{{Schema: "app", Name: "vq", Definition: "select `app`.`BUMṔ`(1) AS `x`"}},
				Routines: []Routine{
					{Schema: "app", Name: "bump", Function: true, Body: "BEGIN UPDATE jobs SET n = n + 1; RETURN 1; END"},
					{Schema: "app", Name: "touch", Body: "DELETE FROM ledger"},
				},
			},
			want: []string{
				"fence app.q (triggers) INSERT: app.jobs[@]; DELETE: app.ledger[billing]",
				"fence app.vq (view) refuse reading (calls app.bump)",
				"refuse function app.bump writes app.jobs",
				"refuse procedure app.touch writes app.ledger",
			},
		},
		{
			name: "sql_mode=ORACLE bodies call procedures without CALL",
			snap: Snapshot{
				Triggers: []Trigger{
					{Schema: "app", Name: "o_ai", Table: "o", Event: OpInsert, Body: "BEGIN touch; END", SQLMode: "PIPES_AS_CONCAT,ANSI_QUOTES,IGNORE_SPACE,ORACLE"},
					{Schema: "app", Name: "o_bd", Table: "o", Event: OpDelete, Body: "BEGIN <<l>> \"app\".touch(); END", SQLMode: "ORACLE"},
					{Schema: "app", Name: "d_ai", Table: "d", Event: OpInsert, Body: "BEGIN SELECT touch FROM x; END"},
				},
				Routines: []Routine{{Schema: "app", Name: "touch", Body: "DELETE FROM ledger"}},
			},
			want: []string{
				"fence app.o (triggers) INSERT: app.ledger[billing]; DELETE: app.ledger[billing]",
				"refuse procedure app.touch writes app.ledger",
			},
		},
		{
			name: "a protected table whose trigger and cascade reach other protected tables",
			snap: Snapshot{
				Triggers: []Trigger{
					{Schema: "app", Name: "j_ai", Table: "jobs", Event: OpInsert, Body: "INSERT INTO ledger (id) VALUES (NEW.id)"},
					{Schema: "app", Name: "j_au", Table: "jobs", Event: OpUpdate, Body: "UPDATE fenced_job_leases SET fence_token = 0"},
					{Schema: "app", Name: "j_bd", Table: "jobs", Event: OpDelete, Body: "SET @x = 1"},
				},
				ForeignKeys: []ForeignKey{
					{Schema: "app", Name: "fk_l", Table: "ledger", RefSchema: "app", RefTable: "jobs", OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
				},
			},
			want: []string{
				"fence app.jobs (triggers+cascade) INSERT: app.ledger[billing]; UPDATE: app.fenced_job_leases[@]; DELETE: app.ledger[billing]; refuse UPDATE",
			},
		},
		{
			name: "procedure calling procedure, function calling function, from another schema",
			snap: Snapshot{Routines: []Routine{
				{Schema: "app", Name: "outer_p", Body: "BEGIN CALL inner_p(); END"},
				{Schema: "app", Name: "inner_p", Body: "BEGIN SELECT 1; DELETE FROM ledger; END"},
				{Schema: "other", Name: "f_outer", Function: true, Body: "RETURN app.f_inner(1) + 1"},
				{Schema: "app", Name: "f_inner", Function: true, Body: "BEGIN INSERT INTO jobs VALUES (1); RETURN 1; END"},
				{Schema: "app", Name: "harmless", Body: "BEGIN SELECT * FROM jobs; END"},
			}},
			want: []string{
				"refuse function app.f_inner writes app.jobs",
				"refuse function other.f_outer writes app.jobs",
				"refuse procedure app.inner_p writes app.ledger",
				"refuse procedure app.outer_p writes app.ledger",
			},
		},
		{
			name: "dynamic SQL writes everything",
			snap: Snapshot{Routines: []Routine{
				{Schema: "app", Name: "dyn", Body: "BEGIN PREPARE s FROM @q; EXECUTE s; END"},
				{Schema: "app", Name: "imm", Body: "BEGIN EXECUTE IMMEDIATE CONCAT('DEL', 'ETE FROM t'); END"},
				{Schema: "app", Name: "caller", Body: "CALL dyn()"},
			}},
			want: []string{
				"refuse procedure app.caller writes app.jobs (dynamic SQL)",
				"refuse procedure app.dyn writes app.jobs (dynamic SQL)",
				"refuse procedure app.imm writes app.jobs (dynamic SQL)",
				"dynamic SQL in app.dyn",
				"dynamic SQL in app.imm",
			},
		},
		{
			name: "recursive procedures end",
			snap: Snapshot{Routines: []Routine{
				{Schema: "app", Name: "a", Body: "BEGIN CALL b(); END"},
				{Schema: "app", Name: "b", Body: "BEGIN CALL a(); IF 0 THEN DELETE FROM jobs; END IF; END"},
			}},
			want: []string{
				"refuse procedure app.a writes app.jobs",
				"refuse procedure app.b writes app.jobs",
			},
		},
		{
			name: "cascading foreign keys",
			snap: Snapshot{ForeignKeys: []ForeignKey{
				{Schema: "app", Name: "fk_c", Table: "jobs", RefSchema: "app", RefTable: "customers", OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
				{Schema: "app", Name: "fk_n", Table: "ledger", RefSchema: "app", RefTable: "accounts", OnDelete: "SET NULL", OnUpdate: "CASCADE"},
				{Schema: "app", Name: "fk_r", Table: "ledger", RefSchema: "app", RefTable: "plain", OnDelete: "RESTRICT", OnUpdate: "NO ACTION"},
				{Schema: "app", Name: "fk_g", Table: "customers", RefSchema: "app", RefTable: "regions", OnDelete: "CASCADE", OnUpdate: "CASCADE"},
			}},
			want: []string{
				"fence app.accounts (cascade) UPDATE: app.ledger[billing]; DELETE: app.ledger[billing]",
				"fence app.customers (cascade) DELETE: app.jobs[@]",
				"fence app.regions (cascade) DELETE: app.jobs[@]",
			},
		},
		{
			name: "cascades do not fire triggers",
			snap: Snapshot{
				ForeignKeys: []ForeignKey{{Schema: "app", Name: "fk", Table: "child", RefSchema: "app", RefTable: "parent", OnDelete: "CASCADE", OnUpdate: "CASCADE"}},
				Triggers:    []Trigger{{Schema: "app", Name: "c_ad", Table: "child", Event: OpDelete, Body: "DELETE FROM jobs"}},
			},
			want: []string{"fence app.child (triggers) DELETE: app.jobs[@]"},
		},
		{
			name: "a view over a trigger table fires its triggers",
			snap: Snapshot{
				Views:    []View{{Schema: "app", Name: "vo", Definition: "select `app`.`orders`.`id` AS `id` from `app`.`orders`"}},
				Triggers: []Trigger{{Schema: "app", Name: "o_bi", Table: "orders", Event: OpInsert, Body: "INSERT INTO jobs VALUES (NEW.id)"}},
			},
			want: []string{
				"fence app.orders (triggers) INSERT: app.jobs[@]",
				"fence app.vo (view) INSERT: app.jobs[@]",
			},
		},
		{
			name: "a trigger writing through a view",
			snap: Snapshot{
				Views:    []View{{Schema: "app", Name: "vj", Definition: "select `app`.`jobs`.`id` AS `id` from `app`.`jobs`"}},
				Triggers: []Trigger{{Schema: "app", Name: "o_bi", Table: "orders", Event: OpUpdate, Body: "UPDATE vj SET id = NEW.id"}},
			},
			want: []string{
				"fence app.orders (triggers) UPDATE: app.jobs[@]",
				"fence app.vj (view) INSERT: app.jobs[@]; UPDATE: app.jobs[@]; DELETE: app.jobs[@]",
			},
		},
		{
			name: "reaching the lease table is refused",
			snap: Snapshot{Triggers: []Trigger{{Schema: "app", Name: "forge", Table: "t", Event: OpInsert, Body: "UPDATE fenced_job_leases SET fence_token = fence_token + 1"}}},
			want: []string{"fence app.t (triggers) INSERT: app.fenced_job_leases[@]; refuse INSERT"},
		},
		{
			name: "a hidden trigger body is refused, hidden routine body writes everything",
			snap: Snapshot{
				Triggers: []Trigger{{Schema: "app", Name: "h", Table: "t", Event: OpDelete}},
				Routines: []Routine{{Schema: "app", Name: "hp"}},
			},
			want: []string{
				"fence app.t (triggers) DELETE: app.jobs[@] app.ledger[billing] app.fenced_job_leases[@]; refuse DELETE",
				"refuse procedure app.hp writes app.jobs (body not visible)",
				"hidden body of procedure app.hp",
				"hidden body of trigger app.h",
			},
		},
		{
			name: "view reading a refused function",
			snap: Snapshot{
				Views: []View{
					{Schema: "app", Name: "vf", Definition: "select `app`.`bump`(1) AS `x`"},
					{Schema: "app", Name: "vff", Definition: "select `vf`.`x` AS `x` from `app`.`vf`"},
				},
				Routines: []Routine{{Schema: "app", Name: "bump", Function: true, Body: "BEGIN UPDATE jobs SET n = n + 1; RETURN 1; END"}},
			},
			want: []string{
				"fence app.vf (view) refuse reading (calls app.bump)",
				"fence app.vff (view) refuse reading (calls app.bump)",
				"refuse function app.bump writes app.jobs",
			},
		},
		{
			name: "events are reported",
			snap: Snapshot{Events: []Event{
				{Schema: "app", Name: "purge", Body: "DELETE FROM jobs WHERE done"},
				{Schema: "app", Name: "noop", Body: "SELECT 1"},
			}},
			want: []string{"unfenceable event app.purge writes app.jobs"},
		},
		{
			name: "DDL in a routine counts as writing what it names",
			snap: Snapshot{Routines: []Routine{
				{Schema: "app", Name: "wipe", Body: "BEGIN TRUNCATE TABLE jobs; END"},
				{Schema: "app", Name: "mk", Body: "BEGIN CREATE TABLE x (id INT); SELECT TRUNCATE(1.5, 0); END"},
			}},
			want: []string{"refuse procedure app.wipe writes app.jobs"},
		},
		{
			name: "ANSI_QUOTES bodies quote names with double quotes",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "app", Name: "aq", Table: "t", Event: OpInsert, SQLMode: "STRICT_TRANS_TABLES,ANSI_QUOTES", Body: "INSERT INTO \"jobs\" VALUES (1)"},
			}},
			want: []string{"fence app.t (triggers) INSERT: app.jobs[@]"},
		},
		{
			name: "names are case-insensitive",
			snap: Snapshot{Triggers: []Trigger{
				{Schema: "App", Name: "up", Table: "T", Event: OpInsert, Body: "insert into APP.JOBS values (1)"},
			}},
			want: []string{"fence App.T (triggers) INSERT: app.jobs[@]"},
		},
		{
			name: "MERGE over a protected table is fenced like a view over it",
			snap: Snapshot{Engines: []TableEngine{
				{Schema: "app", Name: "m", Engine: "MRG_MyISAM", Union: []Name{{"app", "ledger"}, {"app", "other"}}},
				{Schema: "app", Name: "m_harmless", Engine: "MRG_MYISAM", Union: []Name{{"app", "other"}}},
			}},
			want: []string{"fence app.m (merge) INSERT: app.ledger[billing]; UPDATE: app.ledger[billing]; DELETE: app.ledger[billing]"},
		},
		{
			name: "MERGE over the lease table is refused",
			snap: Snapshot{Engines: []TableEngine{
				{Schema: "app", Name: "ml", Engine: "MRG_MyISAM", Union: []Name{{"App", "FENCED_JOB_LEASES"}}},
			}},
			want: []string{"fence app.ml (merge) INSERT: app.fenced_job_leases[@]; UPDATE: app.fenced_job_leases[@]; " +
				"DELETE: app.fenced_job_leases[@]; refuse INSERT|UPDATE|DELETE"},
		},
		{
			name: "forwarding engines: every write refused, in any case; unknown engines too; local ones not",
			snap: Snapshot{Engines: []TableEngine{
				{Schema: "app", Name: "fx", Engine: "FEDERATED"},
				{Schema: "app", Name: "cn", Engine: "connect"},
				{Schema: "app", Name: "sp", Engine: "SPIDER"},
				{Schema: "app", Name: "odd", Engine: "NDBCLUSTER"},
				{Schema: "app", Name: "plain", Engine: "Aria"},
			}},
			want: []string{
				"unfenceable table app.cn (ENGINE=connect): every write refused",
				"unfenceable table app.fx (ENGINE=FEDERATED): every write refused",
				"unfenceable table app.odd (ENGINE=NDBCLUSTER): every write refused",
				"unfenceable table app.sp (ENGINE=SPIDER): every write refused",
			},
		},
		{
			name: "writes that reach a forwarding table are refused: a view, a trigger, a routine, an event",
			snap: Snapshot{
				Engines: []TableEngine{{Schema: "app", Name: "fx", Engine: "FEDERATED"}},
				Views:   []View{{Schema: "app", Name: "vfx", Definition: "select `app`.`fx`.`id` AS `id` from `app`.`fx`"}},
				Triggers: []Trigger{
					{Schema: "app", Name: "o_ai", Table: "orders", Event: OpInsert, Body: "INSERT INTO fx VALUES (NEW.id)"},
					{Schema: "app", Name: "j_ad", Table: "jobs", Event: OpDelete, Body: "DELETE FROM vfx WHERE id = OLD.id"},
				},
				Routines: []Routine{{Schema: "app", Name: "p", Body: "BEGIN UPDATE fx SET n = 0; END"}},
				Events:   []Event{{Schema: "app", Name: "e", Body: "DELETE FROM fx"}},
			},
			want: []string{
				"unfenceable table app.fx (ENGINE=FEDERATED): every write refused",
				"fence app.jobs (triggers) refuse DELETE",
				"fence app.orders (triggers) refuse INSERT",
				"fence app.vfx (view) refuse INSERT|UPDATE|DELETE",
				"refuse procedure app.p writes app.fx (ENGINE=FEDERATED)",
				"unfenceable event app.e writes app.fx",
			},
		},
		{
			name: "a protected table whose engine forwards: its writes are refused too",
			snap: Snapshot{Engines: []TableEngine{{Schema: "app", Name: "ledger", Engine: "SPIDER"}}},
			want: []string{"unfenceable table app.ledger (ENGINE=SPIDER): every write refused"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Close(&tc.snap, testProt).Lines()
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("closure:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestSameName(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"bump", "bump", true},
		{"bump", "BUMP", true},
		{"bump", "bÜmp", true},
		{"bümp", "bump", true},
		{"bump", "bumṕ", true},
		{"bump", "bump\u0301", false}, // a combining accent is a letter of its own (measured: another name)
		{"slow", "ſlow", true},
		{"bump", "bumx", false},
		{"bump", "bum", false},
		{"b_mp", "b-mp", false},
		{"app.v", "app.V", true},
		{"app.v", "apq.v", false},
		{"r\xffs", "rés", true}, // a byte that is not UTF-8 counts as one letter
	} {
		if got := SameName(c.a, c.b); got != c.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := SameName(c.b, c.a); got != c.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}

// TestKnownFunctions: the closure keeps every stored function's name,
// writer or not, and the UDFs'; names compare exactly (case aside), never
// the server's looser way, which would let a new function pass for a
// known one.
func TestKnownFunctions(t *testing.T) {
	snap := &Snapshot{
		Routines: []Routine{
			{Schema: "app", Name: "fmt", Function: true, Body: "RETURN 1"},
			{Schema: "app", Name: "bump", Function: true, Body: "BEGIN UPDATE jobs SET n = 1; RETURN 1; END"},
			{Schema: "app", Name: "rés", Function: true, Body: "RETURN 1"},
			{Schema: "app", Name: "proc", Body: "SELECT 1"},
		},
		UDFs: []string{"Sphinx_Snippets"},
	}
	c := Close(snap, []Protected{{Schema: "app", Table: "jobs"}})
	for _, k := range []struct {
		schema, name string
		want         bool
	}{
		{"app", "fmt", true}, {"APP", "FMT", true}, {"app", "bump", true}, {"app", "RÉS", true},
		{"app", "rxs", false}, {"app", "res", false}, {"other", "fmt", false}, {"app", "proc", false}, {"app", "new", false},
	} {
		if got := c.KnownFunction(k.schema, k.name); got != k.want {
			t.Errorf("KnownFunction(%s, %s) = %v, want %v", k.schema, k.name, got, k.want)
		}
	}
	if !c.KnownUDF("sphinx_snippets") || c.KnownUDF("sphinx") || (*Closure)(nil).KnownUDF("x") || (*Closure)(nil).KnownFunction("a", "b") {
		t.Errorf("KnownUDF: wrong")
	}
}

// TestForwardRefusal: the rewriter's view of the closure: a forwarding
// table refuses every operation with a reason naming it and its engine,
// has no targets (a fence cannot hold), and is among the fast path's names.
func TestForwardRefusal(t *testing.T) {
	c := Close(&Snapshot{
		Engines: []TableEngine{{Schema: "app", Name: "fx", Engine: "FEDERATED"}},
		Views:   []View{{Schema: "app", Name: "vmix", Definition: "select 1 from `app`.`fx` join `app`.`jobs`"}},
	}, testProt)
	f := c.Table("APP", "FX")
	if f == nil {
		t.Fatal("app.fx not in the closure")
	}
	if f.Refuse != OpAll || f.Kind&KindForward == 0 || f.Engine != "FEDERATED" || len(f.For(OpAll)) != 0 {
		t.Errorf("app.fx: refuse %v kind %v engine %q targets %v", f.Refuse, f.Kind, f.Engine, f.For(OpAll))
	}
	for _, w := range []string{"app.fx", "ENGINE=FEDERATED", "connection of its own"} {
		if !strings.Contains(f.RefuseWhy, w) {
			t.Errorf("refusal %q does not say %q", f.RefuseWhy, w)
		}
	}
	v := c.Table("app", "vmix")
	if v == nil || v.Refuse != OpAll || !strings.Contains(v.RefuseWhy, "app.fx") {
		t.Fatalf("view over fx and jobs: %+v", v)
	}
	if got := v.For(OpUpdate); len(got) != 1 || got[0].Table != "jobs" {
		t.Errorf("view over fx and jobs: targets %v, want jobs alone (fx is no target)", got)
	}
	names := strings.Join(c.Names(), ",")
	if !strings.Contains(names, "fx") {
		t.Errorf("names %s lack fx", names)
	}
}

func TestMergeUnion(t *testing.T) {
	for _, c := range []struct {
		name, create string
		want         string
		ok           bool
	}{
		{"as SHOW CREATE TABLE prints it", "CREATE TABLE `m` (\n  `id` int(11) NOT NULL,\n  KEY `id` (`id`)\n) ENGINE=MRG_MyISAM " +
			"DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci INSERT_METHOD=LAST UNION=(`a`,`other`.`b`)", "app.a other.b", true},
		{"a column named union is no list", "CREATE TABLE `m` (`union` int) ENGINE=MRG_MyISAM UNION=(`x`)", "app.x", true},
		{"spaces, no =, case", "create table m (id int) engine=merge union ( a , `B``q` )", "app.a app.B`q", true},
		{"no UNION list", "CREATE TABLE `m` (`id` int) ENGINE=MRG_MyISAM", "", true},
		{"unreadable list", "CREATE TABLE `m` (`id` int) ENGINE=MRG_MyISAM UNION=(`a`, 'x')", "", false},
		{"unterminated list", "CREATE TABLE `m` (`id` int) ENGINE=MRG_MyISAM UNION=(`a`", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			names, ok := MergeUnion(c.create, "app")
			var got []string
			for _, n := range names {
				got = append(got, n.Schema+"."+n.Name)
			}
			if strings.Join(got, " ") != c.want || ok != c.ok {
				t.Errorf("MergeUnion = %q, %v; want %q, %v", strings.Join(got, " "), ok, c.want, c.ok)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	for e, want := range map[string]EngineClass{
		"InnoDB": EngineLocal, "MyISAM": EngineLocal, "Aria": EngineLocal, "MEMORY": EngineLocal, "SEQUENCE": EngineLocal,
		"MRG_MyISAM": EngineMerge, "MERGE": EngineMerge, "FEDERATED": EngineForward, "FederatedX": EngineForward,
		"CONNECT": EngineForward, "spider": EngineForward, " Spider ": EngineForward, "OQGRAPH": EngineUnknown, "": EngineUnknown,
	} {
		if got := ClassOf(e); got != want {
			t.Errorf("ClassOf(%q) = %v, want %v", e, got, want)
		}
	}
}

// TestBodyNamesByServerRules: a routine or trigger body that calls a
// refused routine in another spelling (case, accents: routine names are
// utf8mb3_general_ci), in any statement of a compound body, or writes a
// view whose name is not ASCII, is refused like one that names it as
// written.
func TestBodyNamesByServerRules(t *testing.T) {
	snap := &Snapshot{
		Tables: []Name{{Schema: "app", Name: "jobs"}, {Schema: "app", Name: "notes"}, {Schema: "app", Name: "v_über"}},
		Views:  []View{{Schema: "app", Name: "v_über", Definition: "select `app`.`jobs`.`id` AS `id` from `app`.`jobs`"}},
		Routines: []Routine{
			{Schema: "app", Name: "bump", Body: "BEGIN UPDATE jobs SET n = 0; END"},
			{Schema: "app", Name: "bumpf", Function: true, Body: "BEGIN UPDATE jobs SET n = 0; RETURN 1; END"},
			{Schema: "app", Name: "q1", Body: "BEGIN SELECT 1; CALL bÜmp(); END"},
			{Schema: "app", Name: "q2", Body: "BEGIN SELECT 1; IF 1 THEN SET @x = `BÜMPF`(); END IF; END"},
			{Schema: "app", Name: "q3", Body: "BEGIN SELECT 1; UPDATE `v_über` SET id = 1; END"},
			{Schema: "app", Name: "q4", Body: "BEGIN SELECT 1; WHILE 0 DO CALL app.bÜmp(); END WHILE; END"},
			{Schema: "app", Name: "ok", Body: "BEGIN SELECT 1; CALL bumpy(); END"},
		},
		Triggers: []Trigger{{Schema: "app", Name: "n_ai", Table: "notes", Event: OpInsert, Body: "BEGIN SET @a = 1; CALL `bümp`(); END"}},
	}
	c := Close(snap, []Protected{{Schema: "app", Table: "jobs"}, {Schema: "app", Table: "fenced_job_leases", LeaseTable: true}})
	for _, n := range []string{"q1", "q2", "q3", "q4"} {
		if c.Procedure("app", n) == nil {
			t.Errorf("%s: not refused", n)
		}
	}
	if c.Procedure("app", "ok") != nil {
		t.Errorf("ok: refused")
	}
	if f := c.Table("app", "notes"); f == nil || len(f.For(OpInsert)) == 0 {
		t.Errorf("notes: its trigger's call of bümp does not reach jobs")
	}
}
