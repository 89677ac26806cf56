package lease

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/guard_*.sql from what GuardTriggers builds")

var testVars = Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}

func TestGuardTriggersGolden(t *testing.T) {
	for _, c := range []struct {
		file string
		spec TriggerSpec
	}{
		{"guard_innodb_session_lease.sql", TriggerSpec{Schema: "app", Table: "invoices",
			Fence: GuardSpec{Schema: "fence", Table: "fenced_job_leases", Vars: testVars}}},
		{"guard_innodb_fixed_lease.sql", TriggerSpec{Schema: "app", Table: "reconciliation_runs",
			Fence: GuardSpec{Schema: "app", Table: "fenced_job_leases", Lease: "admin:reconciliation", Vars: testVars}}},
		{"guard_galera_exempt.sql", TriggerSpec{Schema: "app", Table: "invoices", Engine: Galera,
			Exempt: []Account{{User: "migrator"}, {User: "ops", Host: "10.0.%"}},
			Fence:  GuardSpec{Schema: "fence", Table: "fenced_job_leases", Vars: Vars{Lease: "l", Owner: "my owner", Token: "t"}}}},
	} {
		t.Run(c.file, func(t *testing.T) {
			gs, err := GuardTriggers(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if len(gs) != 3 {
				t.Fatalf("%d triggers", len(gs))
			}
			var b strings.Builder
			for i, g := range gs {
				if g.Body != gs[0].Body {
					t.Errorf("%s: the events' bodies differ", g.Name)
				}
				if i == 0 {
					b.WriteString(g.CreateSQL("user_trigger") + ";\n")
				} else {
					b.WriteString(g.CreateSQL("") + ";\n")
				}
			}
			got := b.String()
			for i := 0; i < len(got); i++ {
				if got[i] >= 0x80 || got[i] == '?' || got[i] == '"' || got[i] == '\\' {
					t.Fatalf("byte %q at %d: the SQL must be ASCII without '?', '\"' or backslashes", got[i], i)
				}
			}
			path := filepath.Join("testdata", c.file)
			if *updateGolden {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./lease -run TestGuardTriggersGolden -update)", err)
			}
			if got != string(want) {
				t.Fatalf("%s differs from what GuardTriggers builds:\n%s", path, got)
			}
		})
	}
}

func TestGuardTriggerNames(t *testing.T) {
	long := strings.Repeat("t", 64)
	gs, err := GuardTriggers(TriggerSpec{Schema: "app", Table: long, Fence: GuardSpec{Schema: "app", Table: "l", Vars: testVars}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range gs {
		if len(g.Name) > MaxIdentBytes || !IsGuardName(g.Name) || !strings.HasPrefix(g.Name, "fence_guard_v2_") {
			t.Errorf("name %q", g.Name)
		}
		if seen[g.Name] {
			t.Errorf("name %q twice", g.Name)
		}
		seen[g.Name] = true
	}
	if alt := guardName(long, "bi", gs[0].Body, 1); alt == gs[0].Name {
		t.Error("a salt gives the same name")
	}
	if !IsGuardName("FENCE_GUARD_v9_bi_x") || IsGuardName("fence_guar") || IsGuardName("my_trigger") {
		t.Error("IsGuardName")
	}
	other, _ := GuardTriggers(TriggerSpec{Schema: "app", Table: long, Exempt: []Account{{User: "m"}},
		Fence: GuardSpec{Schema: "app", Table: "l", Vars: testVars}})
	if other[0].Name == gs[0].Name {
		t.Error("another body, the same name")
	}
}

func TestGuardTriggersRefuse(t *testing.T) {
	ok := GuardSpec{Schema: "app", Table: "l", Vars: testVars}
	for name, spec := range map[string]TriggerSpec{
		"tidb":           {Schema: "app", Table: "t", Engine: TiDB, Fence: ok},
		"table":          {Schema: "app", Table: "t.x", Fence: ok},
		"lease table":    {Schema: "app", Table: "t", Fence: GuardSpec{Schema: "", Table: "l", Vars: testVars}},
		"lease name":     {Schema: "app", Table: "t", Fence: GuardSpec{Schema: "app", Table: "l", Lease: "x ", Vars: testVars}},
		"exempt at":      {Schema: "app", Table: "t", Fence: ok, Exempt: []Account{{User: "a@b"}}},
		"exempt empty":   {Schema: "app", Table: "t", Fence: ok, Exempt: []Account{{}}},
		"exempt control": {Schema: "app", Table: "t", Fence: ok, Exempt: []Account{{User: "a", Host: "h\n"}}},
	} {
		if _, err := GuardTriggers(spec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := GuardTriggers(TriggerSpec{Schema: "app", Table: "t", Engine: TiDB, Fence: ok}); !errors.Is(err, ErrNoTriggers) {
		t.Errorf("tidb: %v", err)
	}
}

func TestCheckGuardTriggers(t *testing.T) {
	want, err := GuardTriggers(TriggerSpec{Schema: "app", Table: "t", Fence: GuardSpec{Schema: "app", Table: "l", Vars: testVars}})
	if err != nil {
		t.Fatal(err)
	}
	ins, upd, del := want[0], want[1], want[2]
	cur := func(g GuardTrigger, order int) InstalledTrigger {
		return InstalledTrigger{Name: g.Name, Event: g.Event, Timing: "BEFORE", Order: order, Body: g.Body, SQLMode: GuardSQLMode}
	}
	user := func(name, event, timing string, order int) InstalledTrigger {
		return InstalledTrigger{Name: name, Event: event, Timing: timing, Order: order, Body: "SET @x = 1"}
	}
	old := cur(ins, 1)
	old.Name, old.Body = "fence_guard_v0_bi_00000000_t", "BEGIN END"
	modes := cur(upd, 1)
	modes.SQLMode = "ANSI_QUOTES"
	for _, c := range []struct {
		name    string
		have    []InstalledTrigger
		missing string
		first   [3]bool
	}{
		{"all current", []InstalledTrigger{cur(ins, 1), cur(upd, 1), cur(del, 1)}, "", [3]bool{true, true, true}},
		{"none", nil, "INSERT: missing; UPDATE: missing; DELETE: missing", [3]bool{}},
		{"user triggers only", []InstalledTrigger{user("audit", "INSERT", "BEFORE", 1)},
			"INSERT: missing; UPDATE: missing; DELETE: missing", [3]bool{}},
		{"an outdated one", []InstalledTrigger{old, cur(upd, 1), cur(del, 1)},
			"INSERT: outdated (fence_guard_v0_bi_00000000_t)", [3]bool{false, true, true}},
		{"another sql_mode", []InstalledTrigger{cur(ins, 1), modes, cur(del, 1)},
			"UPDATE: outdated (" + upd.Name + ")", [3]bool{true, false, true}},
		{"a hidden body", []InstalledTrigger{cur(ins, 1), cur(upd, 1), {Name: del.Name, Event: "DELETE", Timing: "BEFORE", Order: 1}},
			"DELETE: outdated (" + del.Name + ")", [3]bool{true, true, false}},
		{"as an AFTER trigger", []InstalledTrigger{cur(ins, 1), cur(upd, 1), {Name: del.Name, Event: "DELETE", Timing: "AFTER", Order: 1, Body: del.Body}},
			"DELETE: outdated (" + del.Name + ")", [3]bool{true, true, false}},
		{"a user trigger first", []InstalledTrigger{user("first", "INSERT", "BEFORE", 1), cur(ins, 2), user("after", "UPDATE", "AFTER", 1),
			cur(upd, 1), cur(del, 1)}, "", [3]bool{false, true, true}},
		{"current and an outdated one", []InstalledTrigger{cur(ins, 1), old, cur(upd, 1), cur(del, 1)}, "", [3]bool{true, true, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := CheckGuardTriggers(want, c.have)
			if got := Missing(st); got != c.missing {
				t.Errorf("Missing = %q, want %q", got, c.missing)
			}
			for i := range st {
				if st[i].First != c.first[i] {
					t.Errorf("%s: First = %v", st[i].Event, st[i].First)
				}
			}
		})
	}
}

func TestParseGuardError(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want GuardRefusal
		ok   bool
	}{
		{"fenceproxy database_guard: write to app.invoices refused (stale_token) under lease 'invoice:acme'",
			GuardRefusal{Table: "app.invoices", Reason: StaleToken, Lease: "invoice:acme"}, true},
		{"fenceproxy database_guard: write to app.t refused (no_fence) under lease ''", GuardRefusal{Table: "app.t", Reason: NoFence}, true},
		{"fenceproxy database_guard: write to app.t refused (expired) under lease 'it''s'", GuardRefusal{Table: "app.t", Reason: Expired, Lease: "it''s"}, true},
		{"fenceproxy database_guard: write to app.t refused (lease_missing) under lease 'cut off", GuardRefusal{Table: "app.t", Reason: LeaseMissing, Lease: "cut off"}, true},
		{"fenceproxy database_guard: write to app.t refused (whatever) under lease 'x'", GuardRefusal{}, false},
		{"something else", GuardRefusal{}, false},
	} {
		got, ok := ParseGuardError(c.msg)
		if ok != c.ok || got != c.want {
			t.Errorf("%q: %+v %v, want %+v %v", c.msg, got, ok, c.want, c.ok)
		}
	}
}
