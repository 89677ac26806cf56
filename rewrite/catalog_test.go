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
		},
		Views: []catalog.View{
			{Schema: "app", Name: "v_inv", Definition: "select `app`.`invoices`.`id` AS `id`,`app`.`invoices`.`amount` AS `amount` from `app`.`invoices`"},
			{Schema: "app", Name: "v_runs", Definition: "select `app`.`reconciliation_runs`.`id` AS `id` from `app`.`reconciliation_runs`"},
			{Schema: "app", Name: "v_both", Definition: "select `i`.`id` AS `id`,`r`.`state` AS `state` from (`app`.`invoices` `i` join `app`.`reconciliation_runs` `r` on(`i`.`id` = `r`.`id`))"},
			{Schema: "app", Name: "v_fn", Definition: "select `app`.`bump`(1) AS `x`"},
		},
		Triggers: []catalog.Trigger{
			{Schema: "app", Name: "orders_ai", Table: "orders", Event: catalog.OpInsert, Body: "INSERT INTO invoices (id) VALUES (NEW.id)"},
			{Schema: "app", Name: "shipments_bd", Table: "shipments", Event: catalog.OpDelete, Body: "DELETE FROM billing.ledger WHERE id = OLD.id"},
			{Schema: "app", Name: "forge_ai", Table: "forge", Event: catalog.OpInsert, Body: "UPDATE fenced_job_leases SET fence_token = fence_token + 1"},
		},
		ForeignKeys: []catalog.ForeignKey{
			{Schema: "app", Name: "fk_customer", Table: "invoices", RefSchema: "app", RefTable: "customers", OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
		},
		Routines: []catalog.Routine{
			{Schema: "app", Name: "touch", Body: "BEGIN UPDATE invoices SET amount = amount + 1 WHERE id = x; END"},
			{Schema: "app", Name: "bump", Function: true, Body: "BEGIN UPDATE invoices SET amount = 0; RETURN 1; END"},
			{Schema: "app", Name: "harmless", Body: "BEGIN SELECT * FROM invoices; END"},
		},
	}
}

func catalogEngine(t testing.TB, stale string, cache bool) *Engine {
	t.Helper()
	p := testPolicy(t)
	opts := Options{CacheEntries: -1, ShapeEntries: -1, Catalog: catalog.Close(testSnapshot(), ProtectedFor(p)), CatalogStale: stale}
	if cache {
		opts.ShapeEntries = 4096
	}
	return New(p, opts)
}

// TestCatalogGolden: testdata/catalog/*.golden, decided with testSnapshot's
// closure; stale.golden with a catalog that could not be read lately.
func TestCatalogGolden(t *testing.T) {
	for _, f := range []struct{ file, stale string }{
		{"testdata/catalog/catalog.golden", ""},
		{"testdata/catalog/stale.golden", "connection refused"},
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
	}
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
