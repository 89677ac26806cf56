package policy

import (
	"strings"
	"testing"
)

func TestNewPolicyFillsDefaultsAndIndexes(t *testing.T) {
	tables := []Table{{Name: "app.Runs", Lease: "nightly"}, {Name: "app.invoices"}}
	p, err := NewPolicy(7, Fencing{}, tables)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 7 || p.LeaseTable != DefaultLeaseTable || p.OnStale != OnStaleZeroRows || p.Mode != ModeEnforce ||
		p.Vars != (Variables{DefaultLeaseVar, DefaultOwnerVar, DefaultTokenVar}) {
		t.Errorf("defaults: %+v", p)
	}
	got, ok := p.Lookup("APP", "runs")
	if !ok || got.Schema != "app" || got.Table != "Runs" || got.Lease != "nightly" {
		t.Errorf("Lookup(APP, runs) = %+v, %v", got, ok)
	}
	if _, ok := p.Lookup("app", "other"); ok {
		t.Error("found an unprotected table")
	}
	if s, n := p.LeaseTableFor("app"); s != "app" || n != DefaultLeaseTable {
		t.Errorf("LeaseTableFor = %s.%s", s, n)
	}
	tables[0].Name = "changed.afterwards" // the policy keeps its own copy
	if _, ok := p.Lookup("app", "runs"); !ok {
		t.Error("the policy shares the caller's slice")
	}
	var nilPolicy *Policy
	if _, ok := nilPolicy.Lookup("a", "b"); ok {
		t.Error("nil policy protects something")
	}
}

func TestNewPolicyQualifiedLeaseTable(t *testing.T) {
	p, err := NewPolicy(1, Fencing{LeaseTable: "ops.leases"}, []Table{{Name: "app.leases"}})
	if err != nil {
		t.Fatal(err)
	}
	if s, n := p.LeaseTableFor("app"); s != "ops" || n != "leases" {
		t.Errorf("LeaseTableFor = %s.%s", s, n)
	}
}

func TestNewPolicyRejects(t *testing.T) {
	tests := []struct {
		name    string
		f       Fencing
		tables  []Table
		wantErr string
	}{
		{"bad mode", Fencing{Mode: "loud"}, nil, `"loud" is not one of enforce, shadow`},
		{"bad on_stale", Fencing{OnStale: "drop"}, nil, `"drop" is not one of zero_rows, error`},
		{"same variables", Fencing{Variables: Variables{Owner: "FENCE_TOKEN"}}, nil, `"fence_token" is also the owner variable`},
		{"bad lease table", Fencing{LeaseTable: "a b"}, nil, `"a b": must be name or schema.name`},
		{"unqualified table", Fencing{}, []Table{{Name: "runs"}}, `table "runs": a protected table is named schema.table`},
		{"duplicate", Fencing{}, []Table{{Name: "a.b"}, {Name: "A.B"}}, `table "A.B" is listed twice (also as "a.b")`},
		{"lease table", Fencing{}, []Table{{Name: "a.fenced_job_leases"}}, `"a.fenced_job_leases" is the lease table itself`},
		{"bad fixed lease", Fencing{}, []Table{{Name: "a.b", Lease: "x'y"}}, `table "a.b": lease "x'y": a fixed lease name may contain only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPolicy(1, tt.f, tt.tables)
			if err == nil || p != nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, %v; want error containing %q", p, err, tt.wantErr)
			}
		})
	}
}

func TestConfigPolicyVersions(t *testing.T) {
	c, err := Parse("f.yaml", []byte(knowingly("fencing: {mode: shadow, on_stale: error}\ntables:\n  - name: app.runs\n")))
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := c.Policy(1), c.Policy(2)
	if p1.Version != 1 || p2.Version != 2 {
		t.Errorf("versions %d %d", p1.Version, p2.Version)
	}
	if p2.Mode != ModeShadow || p2.OnStale != OnStaleError {
		t.Errorf("policy %+v", p2)
	}
	if tb, ok := p2.Lookup("app", "runs"); !ok || tb.Line != 3 {
		t.Errorf("Lookup = %+v, %v", tb, ok)
	}

	// A Config built in code gets its policy built on demand.
	hand := &Config{Tables: []Table{{Name: "x.y"}}}
	if _, ok := hand.Policy(5).Lookup("x", "y"); !ok {
		t.Error("hand-built config: table not protected")
	}
}
