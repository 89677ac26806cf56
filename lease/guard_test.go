package lease

import (
	"strings"
	"testing"
	"time"
)

func TestGuardFor(t *testing.T) {
	vars := Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}
	for _, c := range []struct {
		name string
		e    Engine
		spec GuardSpec
		want string
	}{
		{"session lease, InnoDB", InnoDB, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars},
			"SELECT @fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL, fence_l.fence_token = @fence_token, " +
				"fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3), fence_l.fence_token, CAST(@fence_lease AS CHAR), " +
				"LEFT(SHA2(@fence_owner, 256), 16), CAST(@fence_token AS CHAR), UNIX_TIMESTAMP(fence_l.leased_until), TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), fence_l.leased_until) FROM `app`.`fenced_job_leases` AS fence_l " +
				"WHERE fence_l.lease_name = @fence_lease LOCK IN SHARE MODE"},
		{"fixed lease, TiDB", TiDB, GuardSpec{Schema: "app", Table: "leases", Lease: "admin:rec", Vars: Vars{"l", "my owner", "t"}},
			"SELECT @`my owner` IS NULL OR @t IS NULL, fence_l.fence_token = @t, fence_l.owner_token = @`my owner`, " +
				"fence_l.leased_until > SYSDATE(3), fence_l.fence_token, CAST(_utf8mb4 X'61646d696e3a726563' COLLATE utf8mb4_bin AS CHAR), " +
				"LEFT(SHA2(@`my owner`, 256), 16), CAST(@t AS CHAR), UNIX_TIMESTAMP(fence_l.leased_until), TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), fence_l.leased_until) FROM `app`.`leases` AS fence_l " +
				"WHERE fence_l.lease_name = _utf8mb4 X'61646d696e3a726563' COLLATE utf8mb4_bin FOR UPDATE"},
		{"session lease, Galera", Galera, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars},
			"UPDATE `app`.`fenced_job_leases` AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 " +
				"WHERE fence_l.lease_name = @fence_lease AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token " +
				"AND fence_l.leased_until > SYSDATE(3)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := GuardFor(c.e, c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if g.SQL != c.want {
				t.Fatalf("got  %s\nwant %s", g.SQL, c.want)
			}
			if strings.ContainsAny(g.SQL, "?'\"\\") && !strings.Contains(g.SQL, "X'") {
				t.Fatalf("guard text has characters whose reading depends on the session: %s", g.SQL)
			}
		})
	}
	// On Galera the rejection is classified by InnoDB's locking read.
	g, _ := GuardFor(Galera, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars})
	row, _ := GuardFor(InnoDB, GuardSpec{Schema: "app", Table: "fenced_job_leases", Vars: vars})
	if g.Kind != GuardAffected || g.Classify != row.SQL || g.VarsSQL != row.VarsSQL || row.Kind != GuardRow || row.Classify != "" {
		t.Fatalf("Galera guard %+v", g)
	}
	if !g.Holds(1) || g.Holds(0) {
		t.Fatal("Holds: 1 affected row holds, 0 does not")
	}
	if _, err := GuardFor(InnoDB, GuardSpec{Schema: "a`b", Table: "t", Vars: vars}); err == nil {
		t.Fatal("a backquote in the lease table's name was accepted")
	}
}

func TestGuardRead(t *testing.T) {
	g := Guard{Kind: GuardRow}
	for _, c := range []struct {
		row  []Field
		want Reason
	}{
		{fields("0", "1", "1", "1", "7", "job", "abcd", "7", "1796126183.460", "29999000"), Holds},
		{fields("0", "0", "1", "1", "8", "job", "abcd", "7", "1796126183.460", "29999000"), StaleToken},
		{fields("0", "1", "0", "1", "7", "job", "abcd", "7", "1796126183.460", "29999000"), OwnerMismatch},
		{fields("0", "1", "1", "0", "7", "job", "abcd", "7", "1796126183.460", "29999000"), Expired},
		{fields("1", "NULL", "NULL", "1", "7", "job", "NULL", "NULL", "1796126183.460", "29999000"), NoFence},
		{fields("0", "NULL", "1", "1", "7", "job", "abcd", "x", "1796126183.460", "29999000"), StaleToken}, // a token that compares to NULL
	} {
		v, ok := g.Read([][]Field{c.row})
		if !ok || v.Reason != c.want {
			t.Errorf("%v: got %q (%v), want %q", c.row, v.Reason, ok, c.want)
		}
	}
	if v, _ := g.Read([][]Field{fields("0", "1", "1", "1", "7", "job", "abcd", "7", "1796126183.460", "29999000")}); v.Until != "1796126183.460" || !v.RemainingKnown || v.Remaining != 29999*time.Millisecond {
		t.Errorf("until: %+v", v)
	}
	if v, ok := g.Read(nil); !ok || !v.NeedVars {
		t.Errorf("no lease row: %+v", v)
	}
	if v, ok := g.ReadVars([][]Field{fields("0", "job", "abcd", "7")}); !ok || v.Reason != LeaseMissing || *v.PresentedToken != 7 {
		t.Errorf("vars: %+v", v)
	}
}

// fields is a result row as the proxy reads it: "NULL" is SQL NULL.
func fields(s ...string) []Field {
	out := make([]Field, len(s))
	for i, x := range s {
		if x == "NULL" {
			out[i] = Field{Null: true}
		} else {
			out[i] = Field{S: x}
		}
	}
	return out
}

func TestRecheck(t *testing.T) {
	for _, c := range []struct {
		until, want string
		ok          bool
	}{
		{"1796126183.460", "SELECT FROM_UNIXTIME(1796126183.460) > SYSDATE(3)", true},
		{"1796126183", "SELECT FROM_UNIXTIME(1796126183) > SYSDATE(3)", true},
		{"", "", false},
		{"1.2.3", "", false},
		{".5", "", false},
		{"5.", "", false},
		{"1 OR 1", "", false},
		{"-1", "", false},
	} {
		got, ok := Recheck(c.until)
		if got != c.want || ok != c.ok {
			t.Errorf("Recheck(%q) = %q, %v; want %q, %v", c.until, got, ok, c.want, c.ok)
		}
	}
	if !RecheckHolds([][]Field{{{S: "1"}}}) || RecheckHolds([][]Field{{{S: "0"}}}) || RecheckHolds([][]Field{{{Null: true}}}) || RecheckHolds(nil) {
		t.Error("RecheckHolds: only one row of 1 holds")
	}
	for _, c := range [][3]string{{"", "5.5", "5.5"}, {"5.5", "", "5.5"}, {"10.1", "9.9", "9.9"}, {"9.9", "10.1", "9.9"}} {
		if got := EarlierUntil(c[0], c[1]); got != c[2] {
			t.Errorf("EarlierUntil(%q, %q) = %q", c[0], c[1], got)
		}
	}
}
