package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Writes longer than one protocol packet (16 MiB - 1), with the parse
// limits raised so the proxy reads them: the proxy joins the parts (into
// one buffer set aside at the first part) and decides on the whole text.
// With a stale fence none changes the protected table, wherever its
// protected name stands (across the boundary, after it); with a valid
// fence each has the effect it has directly. MariaDB, the proxy's own
// account (catalog on). Measured with more cases (a 17 MiB INSERT, the
// name before and after 33 MiB of comment, DELETE across the boundary,
// REPLACE and INSERT naming the table in the third part): all held, 409 s
// under -race, so three are kept.
func TestMultiPacketWritesFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about 200 MB of statements; skipped in -short mode")
	}
	const part = 1<<24 - 1
	e := newFencedEnv(t, envOptions{account: true, tables: []string{"docs"},
		extra: "limits:\n  max_parse_bytes: 134217728\n  max_query_bytes: 134217728\n"})
	mustExec(t, e.root, "CREATE TABLE docs (id INT PRIMARY KEY, n INT NOT NULL DEFAULT 0, body LONGTEXT)")
	r := strings.Repeat
	// across puts "docs" across the first boundary: its 'd' is the
	// part's last byte.
	across := func(head, tail string) string {
		pad := part - len(head) - len("/**/ ") - 2
		return head + "/*" + r("c", pad) + "*/ docs" + tail
	}
	cases := []struct{ name, q string }{
		{"update, a literal over the boundary", "UPDATE docs SET body = '" + r("x", part) + "', n = 1 WHERE id = 1"},
		{"update, the name across the boundary", across("UPDATE ", " SET n = 4 WHERE id = 1")},
		{"insert, the name after the boundary", "INSERT INTO /*" + r("w", part) + "*/ docs (id, n) VALUES (3, 5)"},
	}
	dump := func() string {
		e.sync(t)
		return queryString(t, e.root, "SELECT COALESCE(GROUP_CONCAT(CONCAT_WS(':', id, n, LENGTH(body)) ORDER BY id), '') FROM docs")
	}
	reset := func() {
		mustExec(t, e.root, "DELETE FROM docs")
		mustExec(t, e.root, "INSERT INTO docs (id, n, body) VALUES (1, 0, 'a')")
	}
	l := e.acquire(t, "docs:big", time.Hour)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The command byte comes first in the packet: byte i of the
			// text is byte i+1 of the payload.
			if i := strings.Index(tc.q, " docs") + 1; strings.Contains(tc.name, "name across") && i+1 != part-1 {
				t.Fatalf("the name starts at payload byte %d, want %d", i+1, part-1)
			}
			ctx := context.Background()
			// Directly, as the app user: the effect a valid fence must have.
			reset()
			dc, err := directDB(t, e.srv, e.db).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			if _, err := dc.ExecContext(ctx, tc.q); err != nil {
				t.Fatalf("directly: %v", err)
			}
			want := dump()
			reset()
			before := dump()
			s := e.session(t)
			mustExec(t, s, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token-1)
			res, err := s.ExecContext(ctx, tc.q)
			var n int64 = -1
			if err == nil {
				n, _ = res.RowsAffected()
			}
			if got := dump(); got != before {
				t.Fatalf("with a stale fence the protected table changed: %s -> %s (%d rows, %v)", before, got, n, err)
			}
			t.Logf("stale: %d rows, %v", n, err)
			mustExec(t, s, "SET @fence_token = ?", l.Token)
			if _, err := s.ExecContext(ctx, tc.q); err != nil {
				t.Fatalf("with a valid fence: %v", err)
			}
			if got := dump(); got != want {
				t.Fatalf("with a valid fence: %s, directly %s", got, want)
			}
		})
	}
}
