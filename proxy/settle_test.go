package proxy

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// The re-asking of decide (settle) and freshCatalogFor (settleUnknown),
// with real rewriters over real catalog closures and a scripted order of
// what the proxy learns: which catalog read completes, what the session's
// sql_mode turns out to be.

// compoundPlain writes a table the first catalog did not have, inside a
// compound statement (which reads differently with and without
// sql_mode=ORACLE, so a session whose sql_mode is unknown is refused for
// that first).
const compoundPlain = "BEGIN NOT ATOMIC DECLARE i INT DEFAULT 0; WHILE i < 3 DO INSERT INTO plain (n) VALUES (i); " +
	"SET i = i + 1; END WHILE; END"

var settleServer = rewrite.Server{Flavor: rewrite.MariaDB, Version: 101119}

// settleEngine is a rewriter protecting app.jobs whose fresh catalog saw
// app.jobs and the given further tables of app.
func settleEngine(t *testing.T, tables ...string) *rewrite.Engine {
	t.Helper()
	pol, err := policy.NewPolicy(1, policy.Fencing{}, []policy.Table{{Name: "app.jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	snap := &catalog.Snapshot{Server: "10.11.19-MariaDB", Tables: []catalog.Name{{Schema: "app", Name: "jobs"}}}
	for _, n := range tables {
		snap.Tables = append(snap.Tables, catalog.Name{Schema: "app", Name: n})
	}
	return rewrite.New(pol, rewrite.Options{Catalog: catalog.Close(snap, rewrite.ProtectedFor(pol))})
}

// settleRun is decide's wiring of settle and settleUnknown: read is the
// scripted catalog read (it may install a new engine through cur).
type settleRun struct {
	sess        rewrite.Session
	cur         *rewrite.Engine
	read        func() bool
	reads, asks int
	modeLearned bool
}

func (r *settleRun) decide() rewrite.Decision {
	ask := func(e *rewrite.Engine) rewrite.Decision {
		r.asks++
		return e.Query([]byte(compoundPlain), settleServer, &r.sess)
	}
	eng := r.cur
	return settle(ask(eng), settler{
		catalog: func(d rewrite.Decision) rewrite.Decision {
			d = settleUnknown(d, func() bool { r.reads++; return r.read() }, func() *rewrite.Engine { return r.cur }, ask)
			eng = r.cur
			return d
		},
		sqlMode: func() bool {
			// SELECT @@SESSION.sql_mode answered the server's default.
			r.modeLearned = true
			r.sess.Oracle, r.sess.ANSIQuotes, r.sess.NoBackslashEscapes = rewrite.Off, rewrite.Off, rewrite.Off
			return true
		},
		charset: func(rewrite.Decision) bool { return false },
		ask:     func() rewrite.Decision { return ask(eng) },
	})
}

// TestSettleReadsTheCatalogAfterLearningSQLMode: the CI failure of
// TestStatementsModelled. A fresh session (sql_mode unknown) sends a
// compound statement writing an unprotected table created a moment before
// the proxy's last catalog read saw it. The first answer is "sql_mode
// unknown"; once it is learned, the answer is "an object the catalog never
// saw", and that refusal must get its catalog read: decide used to return
// it at once, refusing a valid write (in 3 ms, no read).
func TestSettleReadsTheCatalogAfterLearningSQLMode(t *testing.T) {
	old, fresh := settleEngine(t), settleEngine(t, "plain")
	r := &settleRun{sess: rewrite.Session{Schema: "app"}, cur: old}
	r.read = func() bool { r.cur = fresh; return true } // the read installs a catalog with app.plain
	d := r.decide()
	if d.Action == rewrite.Refuse {
		t.Fatalf("refused after %d catalog reads: %v", r.reads, d.Refusal)
	}
	if !r.modeLearned || r.reads != 1 {
		t.Fatalf("sql_mode learned %v, %d catalog reads; want true, 1", r.modeLearned, r.reads)
	}
}

// TestSettleMarksAbsentAfterARead: the read completed and did not have the
// table either (a temporary table, or none): it is marked absent, and the
// write is decided as one to a table the catalog fences nothing on.
func TestSettleMarksAbsentAfterARead(t *testing.T) {
	r := &settleRun{sess: rewrite.Session{Schema: "app"}, cur: settleEngine(t)}
	r.read = func() bool { r.cur = settleEngine(t); return true }
	if d := r.decide(); d.Action == rewrite.Refuse {
		t.Fatalf("refused after a read that had no app.plain: %v", d.Refusal)
	}
	if r.reads != 1 {
		t.Fatalf("%d catalog reads, want 1", r.reads)
	}
}

// TestSettleNoReadFailsClosed: when no read that began after the statement
// arrived completed (the wait timed out, the read failed), nothing is
// marked absent: the statement stays refused, and so does the next one
// until a read settles it. It used to mark the object absent after a
// timed-out wait, and let the write through as if a read had found no
// such object.
func TestSettleNoReadFailsClosed(t *testing.T) {
	e := settleEngine(t)
	r := &settleRun{sess: rewrite.Session{Schema: "app"}, cur: e}
	r.read = func() bool { return false }
	d := r.decide()
	if d.Action != rewrite.Refuse || !d.Refusal.CatalogUnknown {
		t.Fatalf("without a catalog read: %v %+v, want the catalog refusal", d.Action, d.Refusal)
	}
	if d := e.Query([]byte(compoundPlain), settleServer, &r.sess); d.Action != rewrite.Refuse {
		t.Fatalf("the object was marked absent without a read: %v", d.Action)
	}
	if r.reads != 1 {
		t.Fatalf("%d catalog waits, want 1 (a failed wait is not repeated)", r.reads)
	}
}

// TestSettleTerminates: a rewriter that keeps answering with a new unknown
// object does not hold the statement forever.
func TestSettleTerminates(t *testing.T) {
	n := 0
	d := settle(rewrite.Decision{Action: rewrite.Refuse, Refusal: &rewrite.Refusal{SQLModeUnknown: true}}, settler{
		catalog: func(rewrite.Decision) rewrite.Decision {
			n++
			return rewrite.Decision{Action: rewrite.Refuse, Refusal: &rewrite.Refusal{SQLModeUnknown: true, CharsetUnknown: true}}
		},
		sqlMode: func() bool { return true },
		charset: func(rewrite.Decision) bool { return true },
		ask: func() rewrite.Decision {
			return rewrite.Decision{Action: rewrite.Refuse, Refusal: &rewrite.Refusal{CatalogUnknown: true}}
		},
	})
	if d.Action != rewrite.Refuse || n > 3 {
		t.Fatalf("%v after %d catalog reads", d.Action, n)
	}
}
