package lease

import (
	"strconv"
	"strings"
	"testing"
)

func TestVerdictSQL(t *testing.T) {
	vars := Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}
	for _, c := range []struct {
		name    string
		e       Engine
		locking bool
		spec    GuardSpec
		want    string
	}{
		{"fixed lease, InnoDB, locking", InnoDB, true, GuardSpec{Schema: "app", Table: "fenced_job_leases", Lease: "admin:runs", Vars: vars},
			"SELECT @fence_owner IS NULL OR @fence_token IS NULL, CAST('admin:runs' AS CHAR), LEFT(SHA2(@fence_owner, 256), 16), " +
				"CAST(@fence_token AS CHAR), (SELECT CONCAT_WS(',', fence_l.fence_token, fence_l.owner_token = @fence_owner, " +
				"fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` AS fence_l WHERE fence_l.lease_name = 'admin:runs' " +
				"LOCK IN SHARE MODE)"},
		{"session lease, TiDB: no share lock", TiDB, true, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars},
			"SELECT @fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL, CAST(@fence_lease AS CHAR), " +
				"LEFT(SHA2(@fence_owner, 256), 16), CAST(@fence_token AS CHAR), (SELECT CONCAT_WS(',', fence_l.fence_token, " +
				"fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` AS fence_l " +
				"WHERE fence_l.lease_name = @fence_lease)"},
		{"session lease, Galera, not locking", Galera, false, GuardSpec{Schema: "s", Table: "l", Vars: Vars{"a", "b", "c"}},
			"SELECT @b IS NULL OR @c IS NULL OR @a IS NULL, CAST(@a AS CHAR), LEFT(SHA2(@b, 256), 16), CAST(@c AS CHAR), " +
				"(SELECT CONCAT_WS(',', fence_l.fence_token, fence_l.owner_token = @b, fence_l.leased_until > SYSDATE(3)) " +
				"FROM `s`.`l` AS fence_l WHERE fence_l.lease_name = @a)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := VerdictSQL(c.spec, c.e, c.locking); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestWriteFence(t *testing.T) {
	vars := Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}
	for _, c := range []struct {
		name string
		e    Engine
		spec GuardSpec
		want string
	}{
		{"session lease, InnoDB", InnoDB, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars},
			"EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` AS fence_l WHERE fence_l.lease_name = @fence_lease AND " +
				"fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) " +
				"LOCK IN SHARE MODE)"},
		{"fixed lease, TiDB", TiDB, GuardSpec{Schema: "a`b", Table: "l", Lease: "admin:x", Vars: Vars{"l", "my owner", "t"}},
			"EXISTS (SELECT 1 FROM `a``b`.`l` AS fence_l WHERE fence_l.lease_name = 'admin:x' AND " +
				"fence_l.owner_token = @`my owner` AND fence_l.fence_token = @t AND fence_l.leased_until > SYSDATE(3) FOR UPDATE)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			WriteFence(&b, c.spec, c.e)
			if b.String() != c.want {
				t.Fatalf("got  %s\nwant %s", b.String(), c.want)
			}
		})
	}
}

func TestReadVerdict(t *testing.T) {
	for _, c := range []struct {
		name      string
		row       []Field
		want      Reason
		valid     bool
		presented string // presented token, "" for none
		current   string // current token, "" for none
	}{
		{"holds", fields("0", "job", "abc", "7", "7,1,1"), Holds, true, "7", "7"},
		{"taken over", fields("0", "job", "abc", "7", "8,1,1"), StaleToken, true, "7", "8"},
		{"token before owner", fields("0", "job", "abc", "7", "8,0,0"), StaleToken, true, "7", "8"},
		{"no presented token", fields("0", "job", "abc", "NULL", "8,1,1"), StaleToken, true, "", "8"},
		{"owner mismatch", fields("0", "job", "abc", "7", "7,0,1"), OwnerMismatch, true, "7", "7"},
		{"owner NULL compare", fields("0", "job", "abc", "7", "7,,1"), OwnerMismatch, true, "7", "7"},
		{"expired", fields("0", "job", "abc", "7", "7,1,0"), Expired, true, "7", "7"},
		{"no fence context", fields("1", "NULL", "NULL", "NULL", "7,1,1"), NoFence, true, "", ""},
		{"no lease row", fields("0", "job", "abc", "7", "NULL"), LeaseMissing, true, "7", ""},
		{"bad row value", fields("0", "job", "abc", "7", "7,1"), "", false, "", ""},
		{"wrong width", fields("0", "job", "abc", "7"), "", false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, valid := ReadVerdict([][]Field{c.row})
			if valid != c.valid {
				t.Fatalf("valid = %v, want %v", valid, c.valid)
			}
			if !valid {
				return
			}
			if v.Reason != c.want {
				t.Fatalf("reason %q, want %q", v.Reason, c.want)
			}
			if got := tokenText(v.PresentedToken); got != c.presented {
				t.Fatalf("presented token %q, want %q", got, c.presented)
			}
			if got := tokenText(v.CurrentToken); got != c.current {
				t.Fatalf("current token %q, want %q", got, c.current)
			}
		})
	}
	if _, valid := ReadVerdict(nil); valid {
		t.Fatal("no row accepted")
	}
}

func tokenText(p *uint64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatUint(*p, 10)
}

func TestSessionVars(t *testing.T) {
	v := Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}
	if got, want := SessionVarsSQL(v), "SELECT HEX(@fence_lease), HEX(@fence_owner), CAST(@fence_token AS CHAR)"; got != want {
		t.Fatalf("SessionVarsSQL\ngot  %s\nwant %s", got, want)
	}
	l := Lease{Name: "job", Owner: "o1", Token: 42}
	want := "SET @fence_lease = _utf8mb4 X'6a6f62' COLLATE utf8mb4_bin, @fence_owner = X'6f31', @fence_token = 42"
	if got := SetVarsSQL(v, l); got != want {
		t.Fatalf("SetVarsSQL\ngot  %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		name      string
		rows      [][]Field
		ok, valid bool
	}{
		{"set", [][]Field{{{S: "6A6F62"}, {S: "6F31"}, {S: "42"}}}, true, true},
		{"a NULL", [][]Field{{{S: "6A6F62"}, {Null: true}, {S: "42"}}}, false, true},
		{"not hex", [][]Field{{{S: "zz"}, {S: "6F31"}, {S: "42"}}}, false, true},
		{"no row", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, valid := ReadSessionVars(c.rows)
			if ok != c.ok || valid != c.valid || ok && got != l {
				t.Fatalf("got %+v ok=%v valid=%v", got, ok, valid)
			}
		})
	}
}

func TestTableFor(t *testing.T) {
	for _, c := range []struct{ configured, schema, wantS, wantT string }{
		{"fenced_job_leases", "app", "app", "fenced_job_leases"},
		{"ops.leases", "app", "ops", "leases"},
		{"leases", "", "", "leases"},
	} {
		if s, tb := TableFor(c.configured, c.schema); s != c.wantS || tb != c.wantT {
			t.Errorf("TableFor(%q, %q) = %s.%s, want %s.%s", c.configured, c.schema, s, tb, c.wantS, c.wantT)
		}
	}
}
