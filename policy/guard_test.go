package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/lease"
)

const guardUser = "backend:\n  user: fp\n  password_env: FP_PW\n"

func TestDatabaseGuardRules(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string // want: the one error without "f.yaml:"; "" = valid
	}{
		{"absent is off", "tables:\n  - name: app.t\n", ""},
		{"triggers with the proxy's account", guardUser + "fencing:\n  database_guard: triggers\ntables:\n  - name: app.t\n", ""},
		{"triggers without protected tables", "fencing:\n  database_guard: triggers\n", ""},
		{"unknown value", "fencing:\n  database_guard: on\n",
			`2:19: fencing.database_guard: "on" is not one of off, triggers`},
		{"triggers without backend.user", "fencing:\n  database_guard: triggers\ntables:\n  - name: app.t\n",
			`2:19: fencing.database_guard: triggers needs backend.user: serve checks with the proxy's own account that every protected table has its guard triggers`},
		{"triggers on TiDB", "backend:\n  engine: tidb\n  user: fp\n  password_env: FP_PW\nfencing:\n  database_guard: triggers\n",
			`6:19: fencing.database_guard: TiDB has no triggers: set database_guard: off (the proxy still fences every write that passes through it)`},
		{"triggers in shadow mode", guardUser + "fencing:\n  mode: shadow\n  database_guard: triggers\n",
			`6:19: fencing.database_guard: triggers refuse stale writes inside the database whatever the proxy's mode, so shadow mode would not be a trial run; use database_guard: off with mode: shadow`},
		{"exempt accounts", guardUser + "fencing:\n  database_guard: triggers\n  database_guard_exempt: [migrator, \"deploy@10.0.%\", \"'ops'@'%'\"]\n", ""},
		{"exempt without triggers", "fencing:\n  database_guard_exempt: [migrator]\n",
			`2:27: fencing.database_guard_exempt: has no effect without fencing.database_guard: triggers`},
		{"exempt with an empty host", guardUser + "fencing:\n  database_guard: triggers\n  database_guard_exempt: [\"m@\"]\n",
			`6:27: fencing.database_guard_exempt[0]: "m@": the host after '@' is empty (omit it for any host)`},
		{"exempt listed twice", guardUser + "fencing:\n  database_guard: triggers\n  database_guard_exempt: [m, \"'m'\"]\n",
			`6:30: fencing.database_guard_exempt[1]: "'m'" is listed twice (also at [0])`},
		{"exempt with a control character", guardUser + "fencing:\n  database_guard: triggers\n  database_guard_exempt: [\"a\\tb\"]\n",
			`6:27: fencing.database_guard_exempt[0]: "a\tb": an account is user or user@host (the host a pattern such as 10.0.% or %): ` +
				`lease: invalid argument: exempt account "a\tb": a user name of 1 to 128 bytes without '@' or control characters`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(knowingly(c.yaml)))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("no error, want %s", c.want)
			case c.want != "" && strings.TrimPrefix(err.Error(), "f.yaml:") != c.want:
				t.Fatalf("got  %s\nwant %s", err, c.want)
			}
		})
	}
}

func TestDatabaseGuardPolicy(t *testing.T) {
	c, err := Parse("f.yaml", []byte(guardUser+"fencing:\n  lease_table: fence.leases\n  database_guard: triggers\n"+
		"  database_guard_exempt: [migrator, \"deploy@10.0.%\", \"`ops`@`%`\"]\ntables:\n  - name: app.t\n    lease: job\n  - name: app.u\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy(1)
	wantExempt := []lease.Account{{User: "migrator"}, {User: "deploy", Host: "10.0.%"}, {User: "ops", Host: "%"}}
	if p.DatabaseGuard != GuardTriggers || !reflect.DeepEqual(p.GuardExempt, wantExempt) {
		t.Fatalf("policy: %q %+v", p.DatabaseGuard, p.GuardExempt)
	}
	specs := p.GuardSpecs(lease.Galera)
	vars := lease.Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}
	want := []lease.TriggerSpec{
		{Schema: "app", Table: "t", Exempt: wantExempt, Engine: lease.Galera, Fence: lease.GuardSpec{Schema: "fence", Table: "leases", Lease: "job", Vars: vars}},
		{Schema: "app", Table: "u", Exempt: wantExempt, Engine: lease.Galera, Fence: lease.GuardSpec{Schema: "fence", Table: "leases", Vars: vars}},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Fatalf("specs:\n%+v\nwant\n%+v", specs, want)
	}
	for _, s := range specs {
		if _, err := lease.GuardTriggers(s); err != nil {
			t.Fatalf("%s: %v", s.Table, err)
		}
	}
}
