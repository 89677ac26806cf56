package lease_test

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// trickyNames are lease names that would break naive quoting under one
// sql_mode or another, or a client character set.
var trickyNames = []string{
	`it's a "quote" \ and \' -- x`,
	"ünïcødé 🚀 請求書",
	"a;b /* c */ #d `e`",
}

// sessionVariants are the session settings an application may bring into
// the proxy: the builders' statements must mean the same under all of them.
func sessionVariants(flavor string) []struct {
	name    string
	params  url.Values
	mariadb bool
} {
	v := []struct {
		name    string
		params  url.Values
		mariadb bool
	}{
		{"default", nil, false},
		{"ANSI_QUOTES NO_BACKSLASH_ESCAPES", url.Values{"sql_mode": {"'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'"}}, false},
		{"ANSI and friends", url.Values{"sql_mode": {"'ANSI,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH,HIGH_NOT_PRECEDENCE,NO_UNSIGNED_SUBTRACTION'"}}, false},
		{"ORACLE", url.Values{"sql_mode": {"'ORACLE'"}}, true},
		{"TIME_ROUND_FRACTIONAL", url.Values{"sql_mode": {"'TIME_ROUND_FRACTIONAL,ANSI_QUOTES'"}}, true},
		{"latin1 client", url.Values{"charset": {"latin1"}}, false},
		{"CLIENT_FOUND_ROWS", url.Values{"clientFoundRows": {"true"}}, false},
	}
	return slices.DeleteFunc(v, func(x struct {
		name    string
		params  url.Values
		mariadb bool
	}) bool {
		return x.mariadb && flavor != "mariadb"
	})
}

func TestBuildersUnderSessionSettings(t *testing.T) {
	e := newEnv(t)
	for _, v := range sessionVariants(e.srv.Flavor) {
		t.Run(v.name, func(t *testing.T) {
			db := e.session(t, v.params)
			c, err := db.Conn(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conn := lease.NewConn(c)
			ctx := ctxT(t)
			for i, base := range trickyNames {
				name := v.name + " " + base
				owner := `o'w"n\er` + string(rune('0'+i))
				l, err := lease.AcquireOn(ctx, conn, lease.DefaultTable, name, long, lease.WithOwner(owner))
				if err != nil {
					t.Fatalf("acquire %q: %v", name, err)
				}
				if l.Name != name || l.Owner != owner || l.Token != 1 {
					t.Fatalf("acquire read back %#v", l)
				}
				_, err = lease.AcquireOn(ctx, conn, lease.DefaultTable, name, long)
				wantErr(t, "second acquire", err, lease.ErrHeld)
				if l, err = lease.RenewOn(ctx, conn, lease.DefaultTable, l, long); err != nil {
					t.Fatalf("renew %q: %v", name, err)
				}
				st, err := lease.GetOn(ctx, conn, lease.DefaultTable, name)
				if err != nil || st.Name != name || st.Owner != owner || !st.Held {
					t.Fatalf("get %q: %+v, %v", name, st, err)
				}
				if err := lease.ReleaseOn(ctx, conn, lease.DefaultTable, l); err != nil {
					t.Fatalf("release %q: %v", name, err)
				}
				wantErr(t, "second release", lease.ReleaseOn(ctx, conn, lease.DefaultTable, l), lease.ErrLost)
				if l, err = lease.AcquireOn(ctx, conn, lease.DefaultTable, name, long); err != nil || l.Token != 2 {
					t.Fatalf("acquire after release: %#v, %v", l, err)
				}
				// The bytes stored are exactly the name's: checked from a plain
				// root session with a placeholder.
				var n int
				if err := e.root.QueryRowContext(ctx,
					"SELECT COUNT(*) FROM fenced_job_leases WHERE HEX(lease_name) = ? AND fence_token = 2",
					strings.ToUpper(hex.EncodeToString([]byte(name)))).Scan(&n); err != nil || n != 1 {
					t.Fatalf("row of %q as stored: count %d, %v", name, n, err)
				}
			}
			all, err := lease.ListOn(ctx, conn, lease.DefaultTable)
			if err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, st := range all {
				if strings.HasPrefix(st.Name, v.name+" ") {
					found++
				}
			}
			if found != len(trickyNames) {
				t.Fatalf("list found %d of %d", found, len(trickyNames))
			}
		})
	}
}

// zeroCounts reports 0 affected rows for every statement, as a server does
// without CLIENT_FOUND_ROWS when an UPDATE matches but changes nothing.
type zeroCounts struct{ lease.Conn }

func (z zeroCounts) Exec(ctx context.Context, q string) (int64, error) {
	_, err := z.Conn.Exec(ctx, q)
	return 0, err
}

func TestRenewDoesNotTrustAffectedRows(t *testing.T) {
	e := newEnv(t)
	l := mustAcquire(t, e.store, "renew", long)
	c, err := e.app.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nl, err := lease.RenewOn(ctxT(t), zeroCounts{lease.NewConn(c)}, lease.DefaultTable, l, long)
	if err != nil {
		t.Fatalf("a matched renewal reported 0 rows and was called lost: %v", err)
	}
	if nl.Token != l.Token {
		t.Fatalf("renew: %#v", nl)
	}
}

// TestStatementsArePrimaryKeyLookups checks with EXPLAIN, under every
// session variant, that each statement reaches the lease row through the
// primary key and nothing else: a scan would lock other leases' rows.
func TestStatementsArePrimaryKeyLookups(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for i := 0; i < 300; i++ {
		mustAcquire(t, e.store, "filler "+strings.Repeat("x", i%7)+string(rune('a'+i%26))+hex.EncodeToString([]byte{byte(i)}), long)
	}
	if _, err := e.root.ExecContext(ctx, "ANALYZE TABLE fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	const name = "ünïcødé 🚀"
	l := mustAcquire(t, e.store, name, long)
	acq, err := lease.AcquireSQL(lease.DefaultTable, name, l.Owner, long)
	if err != nil {
		t.Fatal(err)
	}
	ren, err := lease.RenewSQL(lease.DefaultTable, name, l.Owner, l.Token, long)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := lease.ReleaseSQL(lease.DefaultTable, name, l.Owner, l.Token)
	status, _ := lease.StatusSQL(lease.DefaultTable, name)
	stmts := map[string]string{
		"acquire update": acq.Update, "acquire read": acq.Read,
		"renew update": ren.Update, "renew read": ren.Read,
		"release": rel, "status": status,
	}
	for _, v := range sessionVariants(e.srv.Flavor) {
		t.Run(v.name, func(t *testing.T) {
			db := e.session(t, v.params)
			for what, q := range stmts {
				plan := explain(t, db, q)
				if plan["key"] != "PRIMARY" || !slices.Contains([]string{"const", "eq_ref", "range", "system"}, plan["type"]) ||
					(plan["rows"] != "1" && plan["rows"] != "") {
					t.Errorf("%s: EXPLAIN %v, want a one-row PRIMARY key lookup\n%s", what, plan, q)
				}
			}
		})
	}
}

func explain(t *testing.T, db *sql.DB, q string) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(ctxT(t), "EXPLAIN "+q)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var plans []map[string]string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for i, c := range cols {
			m[c] = vals[i].String
		}
		plans = append(plans, m)
	}
	if err := rows.Err(); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN %s: %d rows, %v", q, len(plans), err)
	}
	return plans[0]
}

func TestBuilderText(t *testing.T) {
	plan, err := lease.AcquireSQL("app.leases", "job", "o", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := lease.AcquirePlan{
		Update: "UPDATE `app`.`leases` SET owner_token = X'6f', fence_token = fence_token + 1, leased_until = SYSDATE(3) + INTERVAL 1500000 MICROSECOND WHERE lease_name = _utf8mb4 X'6a6f62' COLLATE utf8mb4_bin AND leased_until <= SYSDATE(3)",
		Insert: "INSERT IGNORE INTO `app`.`leases` (lease_name, owner_token, fence_token, leased_until) VALUES (_utf8mb4 X'6a6f62' COLLATE utf8mb4_bin, X'6f', 1, SYSDATE(3) + INTERVAL 1500000 MICROSECOND)",
		Read:   "SELECT HEX(lease_name), HEX(owner_token), fence_token, UNIX_TIMESTAMP(leased_until), TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), leased_until) FROM `app`.`leases` WHERE lease_name = _utf8mb4 X'6a6f62' COLLATE utf8mb4_bin AND owner_token = X'6f'",
	}
	if plan != want {
		t.Fatalf("AcquireSQL:\n got %#v\nwant %#v", plan, want)
	}
	rel, _ := lease.ReleaseSQL("leases", "job", "o", 18446744073709551615)
	if want := "UPDATE `leases` SET leased_until = LEAST(leased_until - INTERVAL 1000 MICROSECOND, SYSDATE(3)) WHERE lease_name = _utf8mb4 X'6a6f62' COLLATE utf8mb4_bin AND owner_token = X'6f' AND fence_token = 18446744073709551615 AND leased_until > SYSDATE(3)"; rel != want {
		t.Fatalf("ReleaseSQL:\n got %s\nwant %s", rel, want)
	}
	// Every statement is pure ASCII, whatever the name and owner.
	p, _ := lease.AcquireSQL("t", "ünï 🚀", "\x00\xff'\\", time.Second)
	r, _ := lease.RenewSQL("t", "ünï 🚀", "\x00\xff'\\", 7, time.Second)
	for _, q := range []string{p.Update, p.Insert, p.Read, r.Update, r.Read} {
		for i := 0; i < len(q); i++ {
			if q[i] < 0x20 || q[i] > 0x7e {
				t.Fatalf("byte %#x at %d in %s", q[i], i, q)
			}
		}
	}
	for _, bad := range []string{"", "a.b.c", "a`b", "a b", "ü", ".t", "t.", strings.Repeat("t", 65)} {
		if _, err := lease.StatusSQL(bad, "x"); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("table %q accepted", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	st, err := lease.ParseStatus([]string{"6A6F62", "6F", "42", "1764420000.123", "-1500"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "job" || st.Owner != "o" || st.Token != 42 || st.Held || st.Remaining != -1500*time.Microsecond ||
		!st.Until.Equal(time.Unix(1764420000, 123e6)) {
		t.Fatalf("%+v", st)
	}
	for _, bad := range [][]string{
		{"6A", "6F", "1"},
		{"zz", "6F", "1", "1.5", "1"},
		{"6A", "6F", "-1", "1.5", "1"},
		{"6A", "6F", "1", "1.5x", "1"},
		{"6A", "6F", "1", "1.5", "x"},
	} {
		if _, err := lease.ParseStatus(bad); err == nil {
			t.Errorf("ParseStatus(%q) accepted", bad)
		}
	}
}

func TestParseTTLSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0.25", 250 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"2.", 2 * time.Second, true},
		{"0.001", time.Millisecond, true},
		{"90.000001", 90*time.Second + time.Microsecond, true},
		{"2592000", lease.MaxTTL, true},
		{"0.0001", 0, false}, // below MinTTL
		{"2592000.000001", 0, false},
		{"99999999999999999999", 0, false},
		{"0.0000001", 0, false},
		{"0", 0, false},
		{"", 0, false},
		{".", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{" 1", 0, false},
		{"1.2.3", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := lease.ParseTTLSeconds(tc.in)
			if tc.ok && (err != nil || got != tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			if !tc.ok && !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("got %v, %v; want ErrInvalid", got, err)
			}
		})
	}
}

func TestLeaseDoesNotPrintItsOwner(t *testing.T) {
	l := lease.Lease{Name: "job", Owner: "s3cret-owner-token", Token: 3}
	for _, s := range []string{l.String(), lease.Status{Lease: l}.Lease.GoString()} {
		if strings.Contains(s, l.Owner) || !strings.Contains(s, lease.OwnerHash(l.Owner)) {
			t.Fatalf("%s", s)
		}
	}
	if h := lease.OwnerHash("x"); len(h) != 16 || h == lease.OwnerHash("X") {
		t.Fatalf("OwnerHash %q", h)
	}
}

func TestLiterals(t *testing.T) {
	n, err := lease.NameLiteral("job")
	if err != nil || n != "_utf8mb4 X'6a6f62' COLLATE utf8mb4_bin" {
		t.Fatalf("%s %v", n, err)
	}
	o, err := lease.OwnerLiteral("\x00'")
	if err != nil || o != "X'0027'" {
		t.Fatalf("%s %v", o, err)
	}
	if _, err := lease.NameLiteral("job "); !errors.Is(err, lease.ErrInvalid) {
		t.Fatal(err)
	}
	if _, err := lease.OwnerLiteral(""); !errors.Is(err, lease.ErrInvalid) {
		t.Fatal(err)
	}
}
