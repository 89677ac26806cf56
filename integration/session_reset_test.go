package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// Collation ids of the handshake and COM_CHANGE_USER.
const (
	collGBK     = 28 // gbk_chinese_ci
	collUTF8MB4 = 45 // utf8mb4_general_ci
	collLatin1  = 8  // latin1_swedish_ci
)

// gbkSmuggle is issue 8's statement: read as utf8mb4, '\xbf\' OR 1) -- ' is
// one string; read as gbk, \xbf\ is one character, the string ends after
// it and "-- " comments out the rest, the fence included.
func gbkSmuggle(table string) string {
	return "UPDATE " + table + " SET status='gbk' WHERE result = '\xbf\\' OR 1) -- '"
}

func seedRuns(t *testing.T, e *fencedEnv, db string) {
	t.Helper()
	mustExec(t, e.root, "DELETE FROM "+db+".reconciliation_runs")
	mustExec(t, e.root, "INSERT INTO "+db+".reconciliation_runs (id, status, result) VALUES (1, 'r1', 'a'), (2, 'r2', 'b'), (3, 'r3', 'c')")
}

func fenceVarsSQL(l lease.Lease) string {
	return fmt.Sprintf("SET @fence_lease = 'admin:reconciliation', @fence_owner = X'%x', @fence_token = %d", l.Owner, l.Token)
}

// TestIssue8ResetConnectionCharset is issue 8, item 3: a session that
// connected with gbk, switched to utf8mb4 and sent COM_RESET_CONNECTION is
// back in gbk on the server; the proxy must read it so.
func TestIssue8ResetConnectionCharset(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	runs := e.db + ".reconciliation_runs"
	held := e.acquire(t, "admin:reconciliation", time.Minute)
	for _, tc := range []struct {
		name  string
		valid bool
	}{{"stale", false}, {"valid", true}} {
		t.Run(tc.name, func(t *testing.T) {
			seedRuns(t, e, e.db)
			l := held
			if !tc.valid {
				l.Token-- // the previous holder's token
			}
			w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db, Collation: collGBK})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.mustQuery(t, "SET NAMES utf8mb4")
			if r, err := w.resetConnection(); err != nil || r.err() != nil {
				t.Fatalf("COM_RESET_CONNECTION: %v %v", err, r.err())
			}
			if cs := w.textRows(w.mustQuery(t, "SELECT @@character_set_client"))[0][0]; cs != "gbk" {
				t.Fatalf("server's character set after the reset: %s, want gbk", cs)
			}
			w.mustQuery(t, fenceVarsSQL(l))
			before := tableDump(t, e.root, runs)

			r, err := w.query(gbkSmuggle("reconciliation_runs"))
			if err != nil {
				t.Fatal(err)
			}
			if e := r.err(); e == nil || e.Code != 1148 {
				t.Errorf("smuggling statement: want ERR 1148 (refused), got\n%v", r)
			}
			if after := tableDump(t, e.root, runs); after != before {
				t.Fatalf("smuggling statement changed the table:\nbefore\n%s\nafter\n%s", before, after)
			}

			// A statement the proxy can read in gbk is fenced as usual.
			r = w.mustQuery(t, "UPDATE reconciliation_runs SET status = 'done' WHERE id = 1")
			want := strings.Replace(before, "1|r1|", "1|done|", 1)
			if !tc.valid {
				want = before
			}
			if after := tableDump(t, e.root, runs); after != want {
				t.Fatalf("fenced UPDATE after the reset:\nwant\n%s\ngot\n%s", want, after)
			}
		})
	}
}

// sessionProbes tell from outcomes what the proxy believes of the session
// (the fence variables are unset, so a fenced write must change nothing):
//
//	charset: gbkSmuggle is refused exactly when the server reads gbk;
//	no_backslash_escapes: read with NO_BACKSLASH_ESCAPES, 'a\' ends the
//	  string and the fence would go before "-- "; without it the whole rest
//	  is the string (that would then swallow the fence: docs.body is TEXT,
//	  and this fence has no quotes) and the fence must follow;
//	schema: an unqualified UPDATE is fenced exactly when DATABASE() is the
//	  protected schema (the other one has an unprotected table of the name).
type sessionTruth struct{ charset, sqlMode, db string }

type wantSession struct{ charset, db string }

func TestSessionStateAfterResetAndChangeUser(t *testing.T) {
	e := newFencedEnv(t, envOptions{tables: []string{"docs"}})
	mustExec(t, e.root, "CREATE TABLE "+e.db+".docs (id INT PRIMARY KEY, body TEXT)")
	docs := e.db + ".docs"
	s := dbtest.Shared(t)
	if err := s.CreateUser(context.Background(), otherUser, otherPassword, "mysql_native_password"); err != nil {
		t.Fatal(err)
	}
	other := dbtest.NewDatabase(t, s)
	mustExec(t, e.root, "CREATE TABLE "+other+".reconciliation_runs (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, result VARCHAR(100), token BIGINT UNSIGNED)")
	runs := e.db + ".reconciliation_runs"
	globalMode := queryString(t, e.root, "SELECT @@GLOBAL.sql_mode")
	if strings.Contains(globalMode, "ANSI_QUOTES") || strings.Contains(globalMode, "NO_BACKSLASH_ESCAPES") {
		t.Skipf("the probes need a global sql_mode without ANSI_QUOTES and NO_BACKSLASH_ESCAPES, not %q", globalMode)
	}
	// The session's sql_mode differs from the global one, which a reset
	// brings back, in NO_BACKSLASH_ESCAPES both ways.
	nbeMode := strings.TrimPrefix(globalMode+",NO_BACKSLASH_ESCAPES", ",")
	modes := []struct {
		name, global, session string
		nbe                   bool // the global mode has NO_BACKSLASH_ESCAPES
	}{
		{"global default", globalMode, "ANSI_QUOTES,NO_BACKSLASH_ESCAPES", false},
		{"global no_backslash_escapes", nbeMode, "ANSI_QUOTES", true},
	}
	// setGlobalMode returns the mode as the server spells it.
	setGlobalMode := func(m string) string {
		mustExec(t, e.root, "SET GLOBAL sql_mode = '"+m+"'")
		return queryString(t, e.root, "SELECT @@GLOBAL.sql_mode")
	}
	t.Cleanup(func() { setGlobalMode(globalMode) })

	dbName := map[string]string{"protected": e.db, "other": other}
	type command func(t *testing.T, w *wireConn)
	reset := func(t *testing.T, w *wireConn) {
		if r, err := w.resetConnection(); err != nil || r.err() != nil {
			t.Fatalf("COM_RESET_CONNECTION: %v %v", err, r.err())
		}
	}
	changeUser := func(password, db string, cs int, fails bool) command {
		return func(t *testing.T, w *wireConn) {
			r, err := w.changeUserCharset(otherUser, password, dbName[db], cs)
			if err != nil {
				t.Fatal(err)
			}
			if (r.err() != nil) != fails {
				t.Fatalf("COM_CHANGE_USER: want failure %v, got\n%v", fails, r)
			}
		}
	}
	setNames := func(cs string) command {
		return func(t *testing.T, w *wireConn) { w.mustQuery(t, "SET NAMES "+cs) }
	}
	for _, tc := range []struct {
		name      string
		handshake byte
		noPlugin  bool   // client without CLIENT_PLUGIN_AUTH (a COM_CHANGE_USER without charset is accepted then)
		names     string // SET NAMES before the commands
		commands  []command
		want      wantSession // measured on MariaDB 10.11; sql_mode is always the global one
	}{
		{"reset after gbk handshake", collGBK, false, "utf8mb4", []command{reset}, wantSession{"gbk", "protected"}},
		{"reset after utf8mb4 handshake", collUTF8MB4, false, "gbk", []command{reset}, wantSession{"utf8mb4", "protected"}},
		{"change user without charset", collGBK, true, "gbk", []command{changeUser(otherPassword, "other", noCharset, false)}, wantSession{"utf8mb4", "other"}},
		{"change user without charset, then reset", collGBK, true, "utf8mb4", []command{changeUser(otherPassword, "other", noCharset, false), reset}, wantSession{"gbk", "other"}},
		{"change user with gbk", collUTF8MB4, false, "", []command{changeUser(otherPassword, "other", collGBK, false)}, wantSession{"gbk", "other"}},
		{"change user with utf8mb4 to the protected schema", collGBK, false, "", []command{changeUser(otherPassword, "protected", collUTF8MB4, false)}, wantSession{"utf8mb4", "protected"}},
		{"change user with gbk, SET NAMES, reset", collUTF8MB4, false, "", []command{changeUser(otherPassword, "other", collGBK, false), setNames("utf8mb4"), reset}, wantSession{"gbk", "other"}},
		{"change user with latin1 after gbk handshake, reset", collGBK, false, "", []command{changeUser(otherPassword, "other", collLatin1, false), reset}, wantSession{"latin1", "other"}},
		{"failed change user", collUTF8MB4, false, "latin1", []command{changeUser("wrong", "other", collUTF8MB4, true)}, wantSession{"utf8mb4", "protected"}},
		{"failed change user with gbk, SET NAMES, reset", collUTF8MB4, false, "", []command{changeUser("wrong", "other", collGBK, true), setNames("utf8mb4"), reset}, wantSession{"gbk", "protected"}},
		{"change user without charset refused for want of a plugin name", collUTF8MB4, false, "", []command{changeUser(otherPassword, "other", noCharset, true)}, wantSession{"utf8mb4", "protected"}},
		{"right password after three failed change user", collUTF8MB4, false, "latin1", []command{
			changeUser("wrong", "other", collUTF8MB4, true), changeUser("wrong", "other", collUTF8MB4, true),
			changeUser("wrong", "other", collUTF8MB4, true), setNames("latin1"), changeUser(otherPassword, "other", collGBK, true),
		}, wantSession{"utf8mb4", "protected"}},
	} {
		for _, mode := range modes {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				global := setGlobalMode(mode.global)
				seedRuns(t, e, e.db)
				seedRuns(t, e, other)
				mustExec(t, e.root, "DELETE FROM "+docs)
				mustExec(t, e.root, "INSERT INTO "+docs+" VALUES (1, 'd1'), (2, 'd2')")
				w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db,
					Collation: tc.handshake, NoPluginAuth: tc.noPlugin})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if tc.names != "" {
					w.mustQuery(t, "SET NAMES "+tc.names)
				}
				w.mustQuery(t, "SET SESSION sql_mode = '"+mode.session+"'")
				for _, c := range tc.commands {
					c(t, w)
				}
				// The probes go first: any OK or EOF the client sees corrects
				// what the proxy believes of NO_BACKSLASH_ESCAPES.
				before, beforeOther := tableDump(t, e.root, runs), tableDump(t, e.root, other+".reconciliation_runs")
				beforeDocs := tableDump(t, e.root, docs)
				nbe := "UPDATE " + docs + " SET body = 'a\\' WHERE id = 1 -- '"
				if _, err := w.query(nbe); err != nil {
					t.Fatal(err)
				}
				if after := tableDump(t, e.root, docs); after != beforeDocs {
					t.Errorf("sql_mode probe without fence changed the protected table:\n%s", after)
				}
				charsetProbe, err := w.query(gbkSmuggle(runs))
				if err != nil {
					t.Fatal(err)
				}
				if after := tableDump(t, e.root, runs); after != before {
					t.Errorf("charset probe without fence changed the protected table:\nbefore\n%s\nafter\n%s", before, after)
				}

				got := readSessionTruth(t, w)
				want := sessionTruth{tc.want.charset, global, dbName[tc.want.db]}
				if got != want {
					t.Fatalf("server's session after the commands: %+v, want %+v (measured on MariaDB 10.11)", got, want)
				}
				refused := charsetProbe.err() != nil && charsetProbe.err().Code == 1148
				// Under NO_BACKSLASH_ESCAPES the probe has an unbalanced
				// parenthesis for the proxy and is refused in any character set.
				if refused != (got.charset == "gbk") && (got.charset == "gbk" || !mode.nbe) {
					t.Errorf("charset probe with the server in %s: refused=%v\n%v", got.charset, refused, charsetProbe)
				}

				r := w.mustQuery(t, "UPDATE reconciliation_runs SET status = 'schema-probe' WHERE id = 1")
				affected := okAffectedRows(r.last())
				wantAffected := uint64(0) // fenced, and no fence set
				if got.db == other {
					wantAffected = 1
				}
				if affected != wantAffected {
					t.Errorf("schema probe in %s: %d rows changed, want %d", got.db, affected, wantAffected)
				}
				if got.db != other {
					if after := tableDump(t, e.root, other+".reconciliation_runs"); after != beforeOther {
						t.Errorf("the unprotected table changed:\n%s", after)
					}
				}
			})
		}
	}
}

// readSessionTruth reads the server's own view of the session.
func readSessionTruth(t *testing.T, w *wireConn) sessionTruth {
	t.Helper()
	row := w.textRows(w.mustQuery(t, "SELECT @@character_set_client, @@sql_mode, DATABASE()"))[0]
	return sessionTruth{row[0], row[1], row[2]}
}

// okAffectedRows reads an OK packet's affected-row count.
func okAffectedRows(p []byte) uint64 {
	n, _, _ := gomysql.LengthEncodedInt(p[1:])
	return n
}
