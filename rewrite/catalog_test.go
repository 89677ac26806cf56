package rewrite

import (
	"path/filepath"
	"testing"

	"github.com/fenceproxy/fenceproxy/catalog"
)

// testSnapshot: one object of each kind over testPolicy's tables.
func testSnapshot() *catalog.Snapshot {
	return &catalog.Snapshot{
		Tables: []catalog.Name{
			{Schema: "app", Name: "invoices"}, {Schema: "app", Name: "reconciliation_runs"}, {Schema: "billing", Name: "ledger"},
			{Schema: "app", Name: "orders"}, {Schema: "app", Name: "shipments"}, {Schema: "app", Name: "customers"},
			{Schema: "app", Name: "forge"}, {Schema: "app", Name: "notes"},
			{Schema: "app", Name: "v_inv"}, {Schema: "app", Name: "v_runs"}, {Schema: "app", Name: "v_both"}, {Schema: "app", Name: "v_fn"},
			{Schema: "app", Name: "fx"}, {Schema: "app", Name: "m_inv"}, {Schema: "app", Name: "v_fx"},
		},
		Views: []catalog.View{
			{Schema: "app", Name: "v_inv", Definition: "select `app`.`invoices`.`id` AS `id`,`app`.`invoices`.`amount` AS `amount` from `app`.`invoices`"},
			{Schema: "app", Name: "v_runs", Definition: "select `app`.`reconciliation_runs`.`id` AS `id` from `app`.`reconciliation_runs`"},
			{Schema: "app", Name: "v_both", Definition: "select `i`.`id` AS `id`,`r`.`state` AS `state` from (`app`.`invoices` `i` join `app`.`reconciliation_runs` `r` on(`i`.`id` = `r`.`id`))"},
			{Schema: "app", Name: "v_fn", Definition: "select `app`.`bump`(1) AS `x`"},
			{Schema: "app", Name: "v_fx", Definition: "select `app`.`fx`.`id` AS `id` from `app`.`fx`"},
		},
		Triggers: []catalog.Trigger{
			{Schema: "app", Name: "orders_ai", Table: "orders", Event: catalog.OpInsert, Body: "INSERT INTO invoices (id) VALUES (NEW.id)"},
			{Schema: "app", Name: "shipments_bd", Table: "shipments", Event: catalog.OpDelete, Body: "DELETE FROM billing.ledger WHERE id = OLD.id"},
			{Schema: "app", Name: "forge_ai", Table: "forge", Event: catalog.OpInsert, Body: "UPDATE fenced_job_leases SET fence_token = fence_token + 1"},
			// Triggers on protected tables that reach other protected tables.
			{Schema: "app", Name: "runs_au", Table: "reconciliation_runs", Event: catalog.OpUpdate, Body: "UPDATE invoices SET amount = 0 WHERE id = NEW.id"},
			{Schema: "billing", Name: "ledger_ai", Table: "ledger", Event: catalog.OpInsert, Body: "UPDATE fenced_job_leases SET fence_token = 0"},
		},
		ForeignKeys: []catalog.ForeignKey{
			{Schema: "app", Name: "fk_customer", Table: "invoices", RefSchema: "app", RefTable: "customers", OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
		},
		Routines: []catalog.Routine{
			{Schema: "app", Name: "touch", Body: "BEGIN UPDATE invoices SET amount = amount + 1 WHERE id = x; END"},
			{Schema: "app", Name: "bump", Function: true, Body: "BEGIN UPDATE invoices SET amount = 0; RETURN 1; END"},
			{Schema: "app", Name: "harmless", Body: "BEGIN SELECT * FROM invoices; END"},
			{Schema: "app", Name: "fwd_p", Body: "BEGIN DELETE FROM fx; END"},
		},
		// Tables whose engine writes elsewhere: a FEDERATED table, a MERGE
		// table over a protected table, and a view over the FEDERATED one.
		Engines: []catalog.TableEngine{
			{Schema: "app", Name: "fx", Engine: "FEDERATED"},
			{Schema: "app", Name: "m_inv", Engine: "MRG_MyISAM", Union: []catalog.Name{{Schema: "app", Name: "invoices"}}},
		},
	}
}

func catalogEngine(t testing.TB, stale string, cache bool) *Engine {
	t.Helper()
	p := testPolicy(t)
	snap := testSnapshot()
	// A view whose name is not ASCII: a latin1 client names it in bytes
	// that are not UTF-8. (Not in the benchmarks' catalog: non-ASCII names
	// take the fast path's slower comparison.)
	snap.Tables = append(snap.Tables, catalog.Name{Schema: "app", Name: "v_\u00fcber"})
	snap.Views = append(snap.Views, catalog.View{Schema: "app", Name: "v_\u00fcber",
		Definition: "select `app`.`invoices`.`id` AS `id` from `app`.`invoices`"})
	addBodyReadings(snap)
	opts := Options{CacheEntries: -1, ShapeEntries: -1, Catalog: catalog.Close(snap, ProtectedFor(p)), CatalogStale: stale}
	if cache {
		opts.ShapeEntries = 4096
	}
	return New(p, opts)
}

// addBodyReadings: triggers on app.memos whose bodies the catalog's former
// lexer read otherwise than the server (testdata/catalog/bodies.golden).
func addBodyReadings(snap *catalog.Snapshot) {
	snap.Server = "10.11.19-MariaDB-0+deb12u1"
	snap.Tables = append(snap.Tables, catalog.Name{Schema: "app", Name: "memos"})
	snap.Routines = append(snap.Routines,
		catalog.Routine{Schema: "app", Name: "123abc", Body: "BEGIN UPDATE invoices SET amount = 0; END"},
		catalog.Routine{Schema: "app", Name: "12ab", Function: true, Body: "BEGIN UPDATE invoices SET amount = 0; RETURN 1; END"})
	snap.Triggers = append(snap.Triggers,
		catalog.Trigger{Schema: "app", Name: "memos_ai", Table: "memos", Event: catalog.OpInsert, Body: "BEGIN CALL 123abc(); END"},
		catalog.Trigger{Schema: "app", Name: "memos_au", Table: "memos", Event: catalog.OpUpdate,
			Body: "BEGIN SET @a = 1; --\x7f '\nUPDATE invoices SET amount = 0; -- '\nEND"},
		catalog.Trigger{Schema: "app", Name: "memos_ad", Table: "memos", Event: catalog.OpDelete, Body: "SET @x = 12ab()"})
}

// TestCatalogGolden: testdata/catalog/*.golden, decided with testSnapshot's
// closure; stale.golden with a catalog that could not be read lately.
func TestCatalogGolden(t *testing.T) {
	for _, f := range []struct{ file, stale string }{
		{"testdata/catalog/catalog.golden", ""},
		{"testdata/catalog/statements.golden", ""},
		{"testdata/catalog/stale.golden", "connection refused"},
		{"testdata/catalog/bodies.golden", ""},
	} {
		for _, cache := range []bool{false, true} {
			e := catalogEngine(t, f.stale, cache)
			preamble, cases := parseGolden(t, f.file)
			changed := false
			for _, c := range cases {
				for run := 1; run <= 2; run++ {
					d := decide(e, []byte(c.in), c.srv, c.sess, c.prepare)
					got := render(e, c, d)
					checkInvariants(t, e, c, d)
					if got != c.out {
						if *update && !cache {
							c.out = got
							changed = true
							continue
						}
						t.Errorf("%s: case %q (shape cache %v, run %d):\n--- in\n%s\n--- got\n%s\n--- want\n%s",
							filepath.Base(f.file), c.name, cache, run, c.in, got, c.out)
					}
				}
			}
			if changed {
				writeGolden(t, f.file, preamble, cases)
			}
		}
	}
}

// benchCatalogEngine: testSnapshot plus 200 more trigger tables, named
// like application tables, none of which the benchmark statements name.
func benchCatalogEngine(b *testing.B) *Engine {
	b.Helper()
	snap := testSnapshot()
	for i := 0; i < 200; i++ {
		name := []string{"order", "item", "stock", "user", "event", "queue", "payment", "tax"}[i%8] + "_t" + itoa(i)
		snap.Triggers = append(snap.Triggers, catalog.Trigger{Schema: "app", Name: name + "_ai", Table: name,
			Event: catalog.OpInsert, Body: "INSERT INTO invoices (id) VALUES (NEW.id)"})
		snap.Tables = append(snap.Tables, catalog.Name{Schema: "app", Name: name})
	}
	// The benchmarks' own table, which the server has.
	snap.Tables = append(snap.Tables, catalog.Name{Schema: "app", Name: "sbtest1"})
	p := testPolicy(b)
	return New(p, Options{Catalog: catalog.Close(snap, ProtectedFor(p))})
}

func BenchmarkFastPathCatalogSelect(b *testing.B) {
	e := benchCatalogEngine(b)
	s := appSession()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchSelect)))
	for b.Loop() {
		if d := e.Query(benchSelect, maria, s); d.Action != Forward || d.Stmts != nil {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkFastPathCatalogUpdate200(b *testing.B) {
	e := benchCatalogEngine(b)
	s := appSession()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchUpdate)))
	for b.Loop() {
		if d := e.Query(benchUpdate, maria, s); d.Action != Forward || d.Stmts != nil {
			b.Fatal(d.Action)
		}
	}
}

// TestCatalogFastPath: the fast path checks the statement's identifiers
// against the catalog's names: a name in any spelling the server resolves
// sends the statement to the slow path; a name only in a string or a
// comment does not.
func TestCatalogFastPath(t *testing.T) {
	snap := testSnapshot()
	// A routine whose own name is not ASCII: called by its ASCII spelling.
	snap.Routines = append(snap.Routines, catalog.Routine{Schema: "app", Name: "rés", Function: true,
		Body: "BEGIN DELETE FROM invoices; RETURN 1; END"})
	p := testPolicy(t)
	e := New(p, Options{Catalog: catalog.Close(snap, ProtectedFor(p))})
	plain := New(p, Options{})
	cases := []struct {
		sql  string
		sess *Session
		fast bool
	}{
		{"SELECT c FROM sbtest1 WHERE id = 1", nil, true},
		{"SELECT 'v_inv', 'bump(1)' FROM t /* UPDATE v_inv */ # orders", nil, true},
		{"SELECT * FROM orders_archive JOIN xv_inv", nil, true},
		{"SELECT @v_inv, @@v_inv", nil, true},
		{"SELECT `v_in``v` FROM t", nil, true},
		{"SELECT res_x, rxt(1), rs(1)", nil, false}, // rxt, rs: functions the catalog never saw (fresh.go)
		{"SELECT rxs(1)", nil, false},               // é may stand for any letter: over-matching refuses more, never less
		{"UPDATE v_inv SET amount = 1", nil, false},
		{"UPDATE V_Inv SET amount = 1", nil, false},
		{"UPDATE `v_inv` SET amount = 1", nil, false},
		{"UPDATE app.`V_INV` SET amount = 1", nil, false},
		{"UPDATE app.v_inv SET amount = 1", nil, false},
		{"SELECT app.bump(1)", nil, false},
		{"SELECT BUMP (1)", nil, false},
		{"SELECT `bu``mp`(1), bump(1)", nil, false},
		{"SELECT bÜmp(1)", nil, false},
		{"SELECT 'é', v_inv FROM t", nil, false},
		{"SELECT 'é', x FROM t", nil, true},
		{"SELECT `bümp`(1)", nil, false},
		{"SELECT res(1)", nil, false},
		{"SELECT RES(1)", nil, false},
		{"/*!UPDATE v_inv SET amount = 1*/", nil, false},
		{"SELECT 1; INSERT INTO orders VALUES (1)", nil, false},
		{"SELECT 1e1orders", nil, false},
		{`DELETE FROM "v_inv"`, &Session{Schema: "app", ANSIQuotes: Unknown, NoBackslashEscapes: Off}, false},
		{`DELETE FROM "v_inv"`, &Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off}, false},
		{`SELECT "v_inv"`, &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off}, true},
	}
	for _, c := range cases {
		t.Run(c.sql, func(t *testing.T) {
			s := c.sess
			if s == nil {
				s = appSession()
			}
			if got := e.fastAll([]byte(c.sql), maria, *s); got != c.fast {
				t.Errorf("fast path %v, want %v", got, c.fast)
			}
			if !plain.fastAll([]byte(c.sql), maria, *s) && c.fast {
				t.Errorf("not fast even without a catalog: the case tests nothing")
			}
		})
	}
}

// TestCatalogStaleFastPath: while the catalog cannot be read, every write
// leaves the fast path, whatever it names.
func TestCatalogStaleFastPath(t *testing.T) {
	e := catalogEngine(t, "connection refused", false)
	for _, q := range []string{"INSERT INTO brand_new VALUES (1)", "/*!update*/ t SET x = 1", "REPLACE t VALUES (1)",
		"WITH c AS (SELECT 1) DELETE t FROM t JOIN c", "CALL p()"} {
		if e.fastAll([]byte(q), maria, *appSession()) {
			t.Errorf("%s: fast path while the catalog is stale", q)
		}
	}
	if !e.fastAll([]byte("SELECT 'insert' FROM t"), maria, *appSession()) {
		t.Errorf("a read with a write keyword in a string left the fast path")
	}
}

func TestHasHigh(t *testing.T) {
	for n := 0; n < 80; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		if hasHigh(b) {
			t.Fatalf("%d ASCII bytes: hasHigh", n)
		}
		for i := 0; i < n; i++ {
			b[i] = 0x80
			if !hasHigh(b) {
				t.Fatalf("byte %d of %d is 0x80: not hasHigh", i, n)
			}
			b[i] = 'a'
		}
	}
}
