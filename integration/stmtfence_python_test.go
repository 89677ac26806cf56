package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// debianPython is Debian's interpreter: the one python3-sqlalchemy and
// python3-pymysql install into (a pyenv shim earlier on PATH has neither).
const debianPython = "/usr/bin/python3"

// needDebianTool skips the test when probe fails (the tool or package is
// not installed), or fails it under FENCEPROXY_REQUIRE_SERVER=1, where
// scripts/test.sh installs the packages.
func needDebianTool(t *testing.T, what, packages string, probe *exec.Cmd) {
	t.Helper()
	if out, err := probe.CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s not installed (apt-get install %s): %v\n%s", what, packages, err, out)
		if os.Getenv(dbtest.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// pctEncode is a fence value as a comment writes it: every byte but
// A-Z a-z 0-9 - . _ ~ as %XX.
func pctEncode(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "%%%02X", c)
		}
	}
	return s.String()
}

// checkNoOwner fails when text holds l's owner in any form a client sends
// it: raw, hex or percent-encoded (and no fence key, as checkNoFence).
func checkNoOwner(t *testing.T, where, text string, l lease.Lease) {
	t.Helper()
	checkNoFence(t, where, text, l)
	if strings.Contains(text, l.Owner) || strings.Contains(strings.ToLower(text), strings.ToLower(pctEncode([]byte(l.Owner)))) {
		t.Errorf("%s holds the owner of %s", where, l.Name)
	}
}

type pyLease struct {
	Name     string `json:"name"`
	OwnerHex string `json:"owner_hex"`
	Token    uint64 `json:"token"`
}

func toPyLease(l lease.Lease) pyLease {
	return pyLease{l.Name, hex.EncodeToString([]byte(l.Owner)), l.Token}
}

// commentCases are leases whose fence comments the examples must write
// byte for byte as lease.FenceComment does: every owner byte, non-ASCII
// and reserved characters in the name, the token's limits.
func commentCases() []lease.Lease {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	out := []lease.Lease{
		{Name: "invoice:acme", Owner: "9f2c", Token: 42},
		{Name: "job/é ü 'x' \"y\" %41+~._-", Owner: "o", Token: 0},
		{Name: "j", Owner: strings.Repeat("\xff", 64), Token: 1<<64 - 1},
		{Name: "k", Owner: "+ %", Token: 1 << 63},
	}
	for i := 0; i < len(all); i += 64 {
		out = append(out, lease.Lease{Name: "owner bytes", Owner: string(all[i : i+64]), Token: uint64(i)})
	}
	return out
}

// checkComments runs prog with one "leaseHex ownerHex token" line per case
// on stdin and compares its lines with lease.FenceComment (and what
// follows it, sep).
func checkComments(t *testing.T, prog *exec.Cmd, sep string) {
	t.Helper()
	var in strings.Builder
	cases := commentCases()
	for _, l := range cases {
		fmt.Fprintf(&in, "%x %x %d\n", l.Name, l.Owner, l.Token)
	}
	prog.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	prog.Stderr = &stderr
	out, err := prog.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", prog.Path, err, out, stderr.String())
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("%d comments for %d leases:\n%s", len(got), len(cases), out)
	}
	for i, l := range cases {
		want := lease.FenceComment(l)
		if want == "" {
			t.Fatalf("case %d: lease.FenceComment refuses %q", i, l.Name)
		}
		if got[i] != want+sep {
			t.Errorf("case %d (%q): %q, lease.FenceComment %q", i, l.Name, got[i], want+sep)
		}
	}
}

// sqlaJob is what the SQLAlchemy driver reports of one job: its raw
// statements, the rows they changed, those that changed none, their
// errors, and the outcome of each ORM step.
type sqlaJob struct {
	Statements int      `json:"statements"`
	Rows       int      `json:"rows"`
	Zero       int      `json:"zero"`
	Errors     []string `json:"errors"`
	ORM        []string `json:"orm"`
}

// TestSQLAlchemyStatementFence runs the documentation's SQLAlchemy example
// (docs/examples/fence_comment_sqlalchemy.py) through the proxy on MariaDB
// with Debian's SQLAlchemy and PyMySQL: one engine, a pool of 2 whose
// sessions all hold job B's valid fence, three jobs of two threads each
// sending their writes by every path that reaches the cursor (text with and
// without parameters, exec_driver_sql with and without, no_parameters,
// executemany), then through the ORM. Job A's lease was taken over by job
// C: no write of A changes a row and each is audited stale under A's lease;
// every write of B and C lands, and the general log shows each fenced under
// its own job's lease and token, and no owner. Under on_stale zero_rows
// and error, to show what the ORM makes of a stale write.
func TestSQLAlchemyStatementFence(t *testing.T) {
	needDebianTool(t, "SQLAlchemy and PyMySQL for "+debianPython, "python3-sqlalchemy python3-pymysql",
		exec.Command(debianPython, "-c", "import sqlalchemy, pymysql"))
	examples, err := filepath.Abs("../docs/examples")
	if err != nil {
		t.Fatal(err)
	}
	checkComments(t, exec.Command(debianPython, "-c", `import sys
sys.path.insert(0, sys.argv[1])
from fence_comment_sqlalchemy import Fence, fence_comment
for line in sys.stdin:
    name, owner, token = line.split()
    print(fence_comment(Fence(bytes.fromhex(name).decode("utf-8"), bytes.fromhex(owner), int(token))), end="|\n")
`, examples), " |")
	driver, err := filepath.Abs("testdata/stmtfence_sqlalchemy_jobs.py")
	if err != nil {
		t.Fatal(err)
	}
	// Per thread 4 rounds of 6 raw statements changing 7 rows (an
	// executemany of 2 goes as two INSERTs), then three ORM steps: 48
	// statements and 56 rows per valid job. A valid job's ORM steps all
	// succeed.
	valid := sqlaJob{Statements: 48, Rows: 56, ORM: []string{
		"insert: ok", "insert: ok", "update existing: ok", "update existing: ok", "update: ok", "update: ok"}}
	for _, c := range []struct {
		onStale string
		stale   sqlaJob // job A's
		audits  int     // job A's writes rejected
	}{
		// A stale INSERT looks done to the ORM (its object gets id 0); a
		// stale UPDATE of a mapped row raises StaleDataError (0 rows
		// matched).
		{"zero_rows", sqlaJob{Statements: 48, Zero: 48, ORM: []string{
			"insert: ok (id 0)", "insert: ok (id 0)", "update existing: StaleDataError", "update existing: StaleDataError",
			"update: NoResultFound", "update: NoResultFound"}}, 56 + 4},
		// Each round stops at its first write, with ERR 1644.
		{"error", sqlaJob{Errors: make([]string, 8), ORM: []string{
			"insert: OperationalError", "insert: OperationalError", "update existing: OperationalError", "update existing: OperationalError",
			"update: NoResultFound", "update: NoResultFound"}}, 8 + 4},
	} {
		t.Run(c.onStale, func(t *testing.T) {
			got, log, e, leases := runSQLAlchemyJobs(t, examples, driver, c.onStale)
			la, lb, lc := leases[0], leases[1], leases[2]
			for _, w := range []struct {
				job  string
				want sqlaJob
			}{{"a", c.stale}, {"b", valid}, {"c", valid}} {
				r := got.Jobs[w.job]
				sort.Strings(r.ORM)
				for _, msg := range r.Errors {
					if c.onStale != "error" || !strings.Contains(msg, "1644") {
						t.Errorf("job %s: %s", w.job, msg)
					}
				}
				if len(r.Errors) != len(w.want.Errors) {
					t.Errorf("job %s: %d errors, want %d", w.job, len(r.Errors), len(w.want.Errors))
				}
				r.Errors, w.want.Errors = nil, nil
				if fmt.Sprint(r) != fmt.Sprint(w.want) {
					t.Errorf("job %s: %+v, want %+v", w.job, r, w.want)
				}
			}
			for _, s := range got.Sessions {
				if !strings.EqualFold(s, hex.EncodeToString([]byte(lb.Owner))) {
					t.Errorf("a pooled session's fence owner changed: %s", s)
				}
			}
			// Every row of a valid job went in with amount 1 or 5 and got
			// four more or went to 5: all at 5. The row every job changed
			// holds B's or C's amount (98, 99), never A's (97).
			for _, w := range []struct{ like, want string }{{"a-%", "0 0"}, {"b-%", "26 0"}, {"c-%", "26 0"}} {
				if got := queryString(t, e.root, "SELECT CONCAT(COUNT(*), ' ', COUNT(NULLIF(amount, 5))) FROM invoices WHERE customer LIKE ?", w.like); got != w.want {
					t.Errorf("rows %s (count, amount not 5): %s, want %s", w.like, got, w.want)
				}
			}
			if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE customer = 'orm'"); got != "98.00" && got != "99.00" {
				t.Errorf("the row every job changed holds %s, want B's 98.00 or C's 99.00", got)
			}
			// Job A's writes were rejected under its own lease, token and
			// owner, as stale, never under the session's (B's).
			stale := 0
			for _, r := range e.auditRecords(t) {
				if r.Lease != la.Name || r.PresentedToken == nil || *r.PresentedToken != la.Token || r.PresentedOwner != lease.OwnerHash(la.Owner) {
					t.Errorf("audit record not under job A's comment: %+v", r)
					continue
				}
				if r.Reason != audit.StaleToken {
					t.Errorf("reason %s, want %s", r.Reason, audit.StaleToken)
				}
				stale++
			}
			if stale != c.audits {
				t.Errorf("%d audit records of job A's stale writes, want %d", stale, c.audits)
			}
			// No owner and no fence key reached the server; each write of B
			// and C reached it fenced by its own job's lease and token (56 raw
			// and 2 ORM writes each).
			for _, l := range leases {
				checkNoOwner(t, "general log", log, l)
			}
			if n := checkFencedBy(t, log, map[string]lease.Lease{"'b-": lb, "'c-": lc}); n != 116 {
				t.Errorf("%d writes of jobs B and C in the general log, want 116", n)
			}
		})
	}
}

type sqlaOutput struct {
	Jobs     map[string]sqlaJob `json:"jobs"`
	Sessions []string           `json:"sessions"`
}

// runSQLAlchemyJobs sets up the leases (A's taken over by C; owners with
// bytes that must be percent-encoded: a quote, %, a space, a NUL,
// non-UTF-8) and runs the driver with the general log on. It returns the
// driver's report, the general log, the env and the leases A, B and C.
func runSQLAlchemyJobs(t *testing.T, examples, driver, onStale string) (sqlaOutput, string, *fencedEnv, []lease.Lease) {
	t.Helper()
	e := newFencedEnv(t, envOptions{onStale: onStale})
	ctx := context.Background()
	acquire := func(name, owner string) lease.Lease {
		l, err := e.store.Acquire(ctx, name, time.Minute, lease.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la := acquire("job:a", "a-owner '%25 /\x00\xff"+fmt.Sprint(time.Now().UnixNano()))
	lb := acquire("job:b", "b-owner \"é\\"+fmt.Sprint(time.Now().UnixNano()))
	if err := e.store.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lc := acquire("job:a", "c-owner:%3A+"+fmt.Sprint(time.Now().UnixNano())) // the takeover
	if lc.Token != la.Token+1 {
		t.Fatalf("takeover token %d after %d", lc.Token, la.Token)
	}
	res, err := e.root.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES ('orm', '2026-04', 1)")
	if err != nil {
		t.Fatal(err)
	}
	ormRow, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(map[string]any{
		"orm_row": ormRow,
		"session": toPyLease(lb),
		"jobs":    map[string]pyLease{"a": toPyLease(la), "b": toPyLease(lb), "c": toPyLease(lc)},
	})
	if err != nil {
		t.Fatal(err)
	}
	read := generalLog(t, e)
	host, port := splitHostPort(t, e.proxy.Addr)
	cmd := exec.Command(debianPython, driver, examples, host, port, dbserver.AppUser, dbserver.AppPassword, e.db)
	cmd.Stdin = bytes.NewReader(spec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s%s", err, out, stderr.String())
	}
	log := read()
	var got sqlaOutput
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	return got, log, e, []lease.Lease{la, lb, lc}
}

// checkFencedBy checks that each write to invoices in the general log
// whose text holds one of fences' prefixes (a customer literal) was fenced
// by that lease and token, and returns how many it checked. An UPDATE
// carries its fence; an INSERT's is the guard SELECT the proxy sent just
// before it on the same connection.
func checkFencedBy(t *testing.T, log string, fences map[string]lease.Lease) int {
	t.Helper()
	entry := regexp.MustCompile(`(?m)^[^\t]*\t\s*(\d+) Query\t(.*)$`)
	guard := map[string]string{}
	writes := 0
	for _, m := range entry.FindAllStringSubmatch(log, -1) {
		conn, text := m[1], m[2]
		if strings.HasPrefix(text, "SELECT 0, fence_l.fence_token = ") {
			guard[conn] = text
			continue
		}
		if !strings.Contains(text, "INTO invoices") && !strings.HasPrefix(text, "UPDATE invoices") {
			continue
		}
		for prefix, l := range fences {
			if !strings.Contains(text, prefix) {
				continue
			}
			writes++
			fence := text
			if strings.HasPrefix(text, "INSERT") {
				fence, guard[conn] = guard[conn], ""
			}
			if !strings.Contains(fence, fmt.Sprintf("X'%x' COLLATE utf8mb4_bin", l.Name)) || !regexp.MustCompile(fmt.Sprintf(`fence_l\.fence_token = %d\b`, l.Token)).MatchString(fence) {
				t.Errorf("a write (%s) not fenced by %s token %d: %s (fence: %s)", prefix, l.Name, l.Token, text, fence)
			}
		}
	}
	return writes
}
