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

// TestSQLAlchemyStatementFence runs the documentation's SQLAlchemy example
// (docs/examples/fence_comment_sqlalchemy.py) through the proxy on MariaDB
// with Debian's SQLAlchemy and PyMySQL: one engine, a pool of 2 whose
// sessions all hold job B's valid fence, three jobs of two threads each
// sending their writes by every path that reaches the cursor (text with and
// without parameters, exec_driver_sql with and without, no_parameters,
// executemany). Job A's lease was taken over by job C: every write of A
// changes 0 rows and is audited under A's lease; every write of B and C
// lands, and the general log shows each fenced under its own job's lease
// and token, and no owner.
func TestSQLAlchemyStatementFence(t *testing.T) {
	needDebianTool(t, "SQLAlchemy and PyMySQL for "+debianPython, "python3-sqlalchemy python3-pymysql",
		exec.Command(debianPython, "-c", "import sqlalchemy, pymysql"))
	examples, err := filepath.Abs("../docs/examples")
	if err != nil {
		t.Fatal(err)
	}
	driver, err := filepath.Abs("testdata/stmtfence_sqlalchemy_jobs.py")
	if err != nil {
		t.Fatal(err)
	}
	e := newFencedEnv(t, envOptions{})
	ctx := context.Background()
	// Owners with bytes that must be percent-encoded (a quote, %, a
	// space, a NUL, non-UTF-8).
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
	spec, err := json.Marshal(map[string]any{
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
	type jobResult struct {
		Statements int      `json:"statements"`
		Rows       int      `json:"rows"`
		Zero       int      `json:"zero"`
		Errors     []string `json:"errors"`
	}
	var got struct {
		Jobs     map[string]jobResult `json:"jobs"`
		Sessions []string             `json:"sessions"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	// Per thread 4 rounds of 6 statements changing 7 rows (an executemany
	// of 2): 48 statements and 56 rows per job.
	for _, c := range []struct {
		job  string
		want jobResult
	}{
		{"a", jobResult{Statements: 48, Rows: 0, Zero: 48}},
		{"b", jobResult{Statements: 48, Rows: 56, Zero: 0}},
		{"c", jobResult{Statements: 48, Rows: 56, Zero: 0}},
	} {
		r := got.Jobs[c.job]
		if len(r.Errors) > 0 {
			t.Errorf("job %s: %d errors, first: %s", c.job, len(r.Errors), r.Errors[0])
		}
		r.Errors = nil
		if fmt.Sprint(r) != fmt.Sprint(c.want) {
			t.Errorf("job %s: %+v, want %+v", c.job, r, c.want)
		}
	}
	for _, s := range got.Sessions {
		if !strings.EqualFold(s, hex.EncodeToString([]byte(lb.Owner))) {
			t.Errorf("a pooled session's fence owner changed: %s", s)
		}
	}
	for _, c := range []struct{ like, want string }{{"a-%", "0 0"}, {"b-%", "24 0"}, {"c-%", "24 0"}} {
		// Every row of a valid job went in with amount 1 or 5 and got four
		// more or none: all at 5.
		if got := queryString(t, e.root, "SELECT CONCAT(COUNT(*), ' ', COUNT(NULLIF(amount, 5))) FROM invoices WHERE customer LIKE ?", c.like); got != c.want {
			t.Errorf("rows %s (count, amount not 5): %s, want %s", c.like, got, c.want)
		}
	}
	// Job A's writes were rejected under its own lease, token and owner,
	// as stale, never under the session's (B's).
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
	// 7 protected writes per round (the executemany is two), 8 rounds.
	if stale != 56 {
		t.Errorf("%d audit records of job A's stale writes, want 56", stale)
	}
	// Each write of B and C reached the server fenced by its own job's
	// lease and token, and no owner or fence key did.
	for _, l := range []lease.Lease{la, lb, lc} {
		checkNoOwner(t, "general log", log, l)
	}
	// An UPDATE carries its fence; an INSERT's is the guard SELECT the
	// proxy sent just before it on the same connection.
	fences := map[string]lease.Lease{"'b-": lb, "'c-": lc}
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
				t.Errorf("a write of job %s not fenced by %s token %d: %s (fence: %s)", prefix[1:2], l.Name, l.Token, text, fence)
			}
		}
	}
	if writes != 112 {
		t.Errorf("%d writes of jobs B and C in the general log, want 112", writes)
	}
}
