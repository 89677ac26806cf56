package rewrite

import (
	"strings"
	"testing"
)

// Through the proxy an app account cannot take a guard trigger off its
// table, put another trigger on a protected table, or alter one.
func TestGuardTriggerDDLRefused(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 4096})
	const guard = "fence_guard_v1_bi_0a8fc0eb_tbl" // no protected table name in it
	for _, c := range []struct{ name, sql string }{
		{"drop", "DROP TRIGGER " + guard},
		{"drop if exists, qualified", "DROP TRIGGER IF EXISTS app." + guard},
		{"drop, quoted and upper case", "DROP TRIGGER `APP`.`FENCE_GUARD_V1_BU_X`"},
		{"drop in an executable comment", "/*!50000 DROP TRIGGER " + guard + " */"},
		{"drop in a MariaDB comment", "/*M!100000 DROP TRIGGER " + guard + " */"},
		{"drop with comments", "DROP /* x */ TRIGGER /* y */ app . " + guard},
		{"drop of an unreadable name", "DROP TRIGGER 'x'"},
		{"drop in a compound statement", "BEGIN NOT ATOMIC DROP TRIGGER " + guard + "; END"},
		{"drop by EXECUTE IMMEDIATE", "EXECUTE IMMEDIATE 'DROP TRIGGER " + guard + "'"},
		{"drop prepared", "PREPARE s FROM 'DROP TRIGGER " + guard + "'"},
		{"create on a protected table", "CREATE TRIGGER t_bi BEFORE INSERT ON invoices FOR EACH ROW SET NEW.amount = 0"},
		{"create on a protected table, qualified", "CREATE TRIGGER x.t BEFORE DELETE ON app.invoices FOR EACH ROW BEGIN END"},
		{"create preceding the guard", "CREATE TRIGGER t_bi BEFORE INSERT ON notes FOR EACH ROW PRECEDES " + guard + " SET @x = 1"},
		{"create with a guard's name", "CREATE TRIGGER " + guard + " BEFORE INSERT ON notes FOR EACH ROW SET @x = 1"},
		{"alter a protected table", "ALTER TABLE invoices ADD COLUMN x INT"},
		{"alter the lease table", "ALTER TABLE fenced_job_leases REMOVE PARTITIONING"},
		{"drop a protected table", "DROP TABLE invoices"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := e.Query([]byte(c.sql), maria, appSession())
			if d.Action != Refuse {
				t.Fatalf("%s: %v, want refused", c.sql, d.Action)
			}
			t.Logf("%s", d.Refusal.Error())
		})
	}
	for _, sql := range []string{"DROP TRIGGER notes_audit", "DROP TRIGGER IF EXISTS other.fenced", "DROP TRIGGER app.fence"} {
		if d := e.Query([]byte(sql), maria, appSession()); d.Action == Refuse {
			t.Errorf("%s: refused (%s), want forwarded: it is no guard trigger", sql, d.Refusal.Error())
		}
	}
	d := e.Query([]byte("DROP TRIGGER "+guard), maria, appSession())
	if !strings.Contains(d.Refusal.Reason, "fenceproxy init") {
		t.Errorf("the refusal does not say what to do: %s", d.Refusal.Reason)
	}
}
