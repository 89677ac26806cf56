package rewrite

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

// A TEMPORARY table hides the real table of the same schema and name from
// every statement of the session that made it, schema-qualified names and
// the fence's own read of the lease table included (measured on MariaDB
// 10.11 and TiDB; integration.TestTemporaryTableShadowing). So the proxy
// refuses every way of making one named like a protected table or a
// lease table; other temporary tables pass.

func TestTemporaryTableRefusals(t *testing.T) {
	// app and billing keep their lease table next to them; ops.jobs uses
	// the qualified lease table of a second policy below.
	qualifiedLeases, err := policy.NewPolicy(1, policy.Fencing{LeaseTable: "locks.leases"},
		[]policy.Table{{Name: "ops.jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	app := appSession()
	other := &Session{Schema: "other", ANSIQuotes: Off, NoBackslashEscapes: Off}
	ansi := &Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off}
	unknown := &Session{Schema: "app"}
	type tc struct {
		name string
		sql  string
		sess *Session
		pol  *policy.Policy
		srv  Server
		prep bool
		want string // in the refusal; "" = not refused
	}
	const lease, prot = "lease table", "protected table"
	cases := []tc{
		{name: "lease: as select", sql: "CREATE TEMPORARY TABLE fenced_job_leases SELECT 'L' AS lease_name", want: lease},
		{name: "lease: column list", sql: "CREATE TEMPORARY TABLE fenced_job_leases (lease_name VARCHAR(191) PRIMARY KEY)", want: lease},
		{name: "lease: like", sql: "CREATE TEMPORARY TABLE fenced_job_leases LIKE notes", want: lease},
		{name: "lease: like itself", sql: "CREATE TEMPORARY TABLE fenced_job_leases LIKE app.fenced_job_leases", want: lease},
		{name: "lease: if not exists", sql: "CREATE TEMPORARY TABLE IF NOT EXISTS fenced_job_leases (x INT)", want: lease},
		{name: "lease: or replace", sql: "CREATE OR REPLACE TEMPORARY TABLE fenced_job_leases (x INT)", want: "fenceproxy cannot parse"},
		{name: "lease: qualified", sql: "CREATE TEMPORARY TABLE app.fenced_job_leases (x INT)", want: lease},
		{name: "lease: quoted qualified", sql: "CREATE TEMPORARY TABLE `app`.`fenced_job_leases` (x INT)", want: lease},
		{name: "lease: spaces around the dot", sql: "CREATE TEMPORARY TABLE app . fenced_job_leases (x INT)", want: lease},
		{name: "lease: upper case", sql: "create temporary table FENCED_JOB_LEASES (x int)", want: lease},
		{name: "lease: other protected schema", sql: "CREATE TEMPORARY TABLE billing.fenced_job_leases (x INT)", want: lease},
		{name: "lease: from another schema", sql: "CREATE TEMPORARY TABLE app.fenced_job_leases (x INT)", sess: other, want: lease},
		{name: "lease: name in exec comment", sql: "CREATE TEMPORARY TABLE /*!fenced_job_leases*/ (x INT)", want: lease},
		{name: "lease: temporary in exec comment", sql: "CREATE /*!TEMPORARY*/ TABLE fenced_job_leases (x INT)", want: lease},
		{name: "lease: M comment", sql: "CREATE /*M!100000 TEMPORARY */ TABLE fenced_job_leases (x INT)", want: lease},
		{name: "lease: engine memory", sql: "CREATE TEMPORARY TABLE fenced_job_leases ENGINE=MEMORY SELECT 1 AS x", want: lease},
		{name: "lease: ansi quotes", sql: `CREATE TEMPORARY TABLE "fenced_job_leases" (x INT)`, sess: ansi, want: lease},
		{name: "lease: sql_mode unknown", sql: `CREATE TEMPORARY TABLE "fenced_job_leases" (x INT)`, sess: unknown, want: "fenced_job_leases"},
		{name: "lease: dotless i is no e", sql: "CREATE TEMPORARY TABLE fenced_job_l\u0131ases (x INT)"},
		{name: "lease: sequence", sql: "CREATE TEMPORARY SEQUENCE fenced_job_leases", want: "fenceproxy cannot parse"},
		{name: "lease: after select in one query", sql: "SELECT 1; CREATE TEMPORARY TABLE fenced_job_leases (x INT)", want: lease},
		// Harmless (other.fenced_job_leases is nobody's lease table), but
		// the name is refused in anything but a plain SELECT (leaselock.go).
		{name: "lease: after use", sql: "USE other; CREATE TEMPORARY TABLE fenced_job_leases (x INT); USE app", sess: other, want: "uses a lease table"},
		{name: "lease: use then create", sql: "USE app; CREATE TEMPORARY TABLE fenced_job_leases (x INT)", sess: other, want: lease},
		{name: "lease: prepare", sql: "PREPARE s FROM 'CREATE TEMPORARY TABLE fenced_job_leases (x INT)'", want: lease},
		{name: "lease: execute immediate", sql: "EXECUTE IMMEDIATE 'CREATE TEMPORARY TABLE fenced_job_leases SELECT 1 AS x'", want: lease},
		{name: "lease: execute immediate latin1", sql: "EXECUTE IMMEDIATE _latin1'CREATE TEMPORARY TABLE fenced_job_leases SELECT 1 AS x'", want: lease},
		{name: "lease: binary protocol prepare", sql: "CREATE TEMPORARY TABLE fenced_job_leases SELECT ? AS x", prep: true, want: lease},
		{name: "lease: compound statement", sql: "BEGIN NOT ATOMIC CREATE TEMPORARY TABLE fenced_job_leases (x INT); END", want: "fenced_job_leases"},
		{name: "lease: stored procedure", sql: "CREATE PROCEDURE p() CREATE TEMPORARY TABLE fenced_job_leases (x INT)", want: "fenced_job_leases"},
		{name: "lease: tidb", sql: "CREATE TEMPORARY TABLE fenced_job_leases (x INT)", srv: tidb, want: lease},
		{name: "lease: tidb global temporary", sql: "CREATE GLOBAL TEMPORARY TABLE fenced_job_leases (x INT) ON COMMIT DELETE ROWS", srv: tidb, want: lease},
		{name: "lease: qualified lease table", sql: "CREATE TEMPORARY TABLE locks.leases (x INT)", pol: qualifiedLeases, want: lease},
		{name: "lease: qualified lease table, unqualified name", sql: "CREATE TEMPORARY TABLE leases (x INT)", pol: qualifiedLeases,
			sess: &Session{Schema: "locks", ANSIQuotes: Off, NoBackslashEscapes: Off}, want: lease},
		{name: "lease: qualified lease table, default name elsewhere", sql: "CREATE TEMPORARY TABLE ops.fenced_job_leases (x INT)", pol: qualifiedLeases},
		{name: "lease: unprotected schema", sql: "CREATE TEMPORARY TABLE other.fenced_job_leases (x INT)", want: "uses a lease table"},

		{name: "rename: to lease", sql: "RENAME TABLE tmp TO fenced_job_leases", want: lease},
		{name: "rename: to lease qualified", sql: "RENAME TABLE tmp TO app.fenced_job_leases", sess: other, want: lease},
		{name: "rename: chain", sql: "RENAME TABLE tmp TO x, x TO fenced_job_leases", want: lease},
		{name: "rename: to protected", sql: "RENAME TABLE tmp TO invoices", want: prot},
		{name: "rename: harmless", sql: "RENAME TABLE tmp TO tmp2"},
		{name: "alter rename to", sql: "ALTER TABLE tmp RENAME TO fenced_job_leases", want: lease},
		{name: "alter rename as", sql: "ALTER TABLE tmp RENAME AS app.fenced_job_leases", want: lease},
		{name: "alter rename bare", sql: "ALTER TABLE tmp RENAME fenced_job_leases", want: lease},
		{name: "alter with other specs", sql: "ALTER TABLE tmp ADD COLUMN z INT, RENAME TO fenced_job_leases", want: lease},
		{name: "alter rename to protected", sql: "ALTER TABLE tmp RENAME TO billing.ledger", want: prot},
		{name: "alter online", sql: "ALTER ONLINE TABLE tmp RENAME TO fenced_job_leases", want: "fenced_job_leases"},
		{name: "alter rename harmless", sql: "ALTER TABLE tmp RENAME TO tmp2"},

		{name: "protected: plain", sql: "CREATE TEMPORARY TABLE invoices (id INT)", want: prot},
		{name: "protected: like itself", sql: "CREATE TEMPORARY TABLE invoices LIKE app.invoices", want: prot},
		{name: "protected: qualified", sql: "CREATE TEMPORARY TABLE billing.ledger SELECT 1 AS x", want: prot},
		{name: "protected: case", sql: "CREATE TEMPORARY TABLE `Reconciliation_Runs` (id INT)", want: prot},
		{name: "protected: long s", sql: "CREATE TEMPORARY TABLE `invoice\u017f` (id INT)", want: prot},

		{name: "other temporary table", sql: "CREATE TEMPORARY TABLE tmp (id INT)"},
		{name: "other temporary table like protected", sql: "CREATE TEMPORARY TABLE tmp LIKE invoices"},
		{name: "drop temporary", sql: "DROP TEMPORARY TABLE tmp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := c.pol
			if pol == nil {
				pol = testPolicy(t)
			}
			sess := c.sess
			if sess == nil {
				sess = app
			}
			srv := c.srv
			if srv == (Server{}) {
				srv = maria
			}
			e := New(pol, Options{})
			var d Decision
			if c.prep {
				d = e.Prepare([]byte(c.sql), srv, sess)
			} else {
				d = e.Query([]byte(c.sql), srv, sess)
			}
			if c.want == "" {
				if d.Action == Refuse {
					t.Fatalf("%s: refused: %s", c.sql, d.Refusal.Error())
				}
				return
			}
			if d.Action != Refuse {
				t.Fatalf("%s: %v, want a refusal", c.sql, d.Action)
			}
			if msg := d.Refusal.Error(); !strings.Contains(msg, c.want) {
				t.Fatalf("%s: refusal %q does not say %q", c.sql, msg, c.want)
			}
		})
	}
}

// TestTemporaryTableRefusalSays: the refusal names the table and says why
// and what to do.
func TestTemporaryTableRefusalSays(t *testing.T) {
	e := New(testPolicy(t), Options{})
	for sql, want := range map[string]string{
		"CREATE TEMPORARY TABLE fenced_job_leases (x INT)": "fenceproxy refused a statement on protected table app.fenced_job_leases: " +
			"a TEMPORARY table named like the lease table app.fenced_job_leases is refused: it " +
			"would shadow it for this session, and every fence of the session would read the session's own rows instead " +
			"of the lease (a stale write would pass); use another name for temporary tables",
		"RENAME TABLE tmp TO fenced_job_leases": "fenceproxy refused a statement on protected table app.fenced_job_leases: " +
			"renaming a table to the lease table app.fenced_job_leases is refused: a TEMPORARY table renamed so would " +
			"shadow it for this session",
		"CREATE TEMPORARY TABLE invoices (x INT)": "fenceproxy refused a statement on protected table app.invoices: " +
			"a TEMPORARY table named like the protected table app.invoices is refused: it " +
			"would shadow it for this session, and the session's writes would go to the temporary table; " +
			"use another name for temporary tables",
	} {
		d := e.Query([]byte(sql), maria, appSession())
		if d.Action != Refuse || !strings.HasPrefix(d.Refusal.Error(), want) {
			t.Errorf("%s:\n got %v %v\nwant %s", sql, d.Action, d.Refusal, want)
		}
	}
}
