package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// The README's Quick start is run as written: its fenced code blocks are
// marked with <!-- readme-test: NAME --> on the line before, and every
// block of the section must carry one of these names.
var quickStartBlocks = []string{"init", "grants", "config", "serve", "client", "sql"}

const readmePath = "../README.md"

// readmeBlock is one marked code block of a README section.
type readmeBlock struct {
	name, lang, text string
	line             int // of the opening fence
}

var (
	readmeMarker = regexp.MustCompile(`^\s*<!--\s*readme-test:\s*([a-z0-9_-]+)\s*-->\s*$`)
	readmeFence  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_-]*)\\s*$")
)

// readmeSection returns the marked code blocks of the section headed
// "## title" of the Markdown file at path. An unmarked block, a marker not
// followed by a block, an unterminated block and a repeated name are
// errors: every command of the section must be run by the test.
func readmeSection(path, title string) (map[string]readmeBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "## "+title {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s: no section %q", path, "## "+title)
	}
	blocks := map[string]readmeBlock{}
	marker := ""
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "## ") {
			break
		}
		if m := readmeMarker.FindStringSubmatch(l); m != nil {
			if marker != "" {
				return nil, fmt.Errorf("%s:%d: marker %q is not followed by a code block", path, i+1, marker)
			}
			marker = m[1]
			continue
		}
		f := readmeFence.FindStringSubmatch(l)
		if f == nil {
			if marker != "" && strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("%s:%d: marker %q is not followed by a code block", path, i, marker)
			}
			continue
		}
		if marker == "" {
			return nil, fmt.Errorf("%s:%d: a code block of %q without a <!-- readme-test: NAME --> marker: every command there must be run by %s", path, i+1, title, "integration/readme_test.go")
		}
		if _, dup := blocks[marker]; dup {
			return nil, fmt.Errorf("%s:%d: a second block named %q", path, i+1, marker)
		}
		indent, open := f[1], i
		var body []string
		for i++; ; i++ {
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: code block %q is not closed", path, open+1, marker)
			}
			if strings.TrimSpace(lines[i]) == "```" {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		blocks[marker] = readmeBlock{name: marker, lang: f[2], text: strings.Join(body, "\n") + "\n", line: open + 1}
		marker = ""
	}
	if marker != "" {
		return nil, fmt.Errorf("%s: marker %q at the end of %q has no code block", path, marker, title)
	}
	return blocks, nil
}

// quickStart reads the Quick start and checks that it has exactly the
// blocks the test runs.
func quickStart(t *testing.T) map[string]readmeBlock {
	t.Helper()
	blocks, err := readmeSection(readmePath, "Quick start")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range quickStartBlocks {
		if _, ok := blocks[name]; !ok {
			t.Errorf("README's Quick start has no block marked %q", name)
		}
	}
	for name, b := range blocks {
		if !strings.Contains(" "+strings.Join(quickStartBlocks, " ")+" ", " "+name+" ") {
			t.Errorf("README.md:%d: block %q is not run by TestReadmeQuickStart: add it to the test", b.line, name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return blocks
}

// sqlStatement is one statement of a SQL block and the comment after it.
type sqlStatement struct {
	text, comment string
}

// splitSQL splits a SQL block into statements (ended by ';' at the end of
// their code) with the "--" comment on the line of their ';'. The README's
// SQL has no ';' or "--" inside strings.
func splitSQL(block string) []sqlStatement {
	var out []sqlStatement
	var cur []string
	for _, l := range strings.Split(block, "\n") {
		code, comment, _ := strings.Cut(l, "--")
		code = strings.TrimSpace(code)
		if code == "" {
			continue
		}
		cur = append(cur, code)
		if strings.HasSuffix(code, ";") {
			text := strings.TrimSuffix(strings.Join(cur, " "), ";")
			out = append(out, sqlStatement{text: strings.TrimSpace(text), comment: strings.TrimSpace(comment)})
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, sqlStatement{text: strings.Join(cur, " ")})
	}
	return out
}

var leadingNumber = regexp.MustCompile(`^(\d+)\b`)

// expectation is what the README's comment promises for a statement: a
// number (the value a SELECT returns, the rows a write changes), or, for
// fence_acquire, a token (a positive integer).
func expectation(s sqlStatement) (want int64, token bool, err error) {
	if m := leadingNumber.FindStringSubmatch(s.comment); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		return n, false, err
	}
	if strings.Contains(strings.ToLower(s.text), "fence_acquire(") {
		return 0, true, nil
	}
	return 0, false, fmt.Errorf("%q: its comment %q starts with no expected number", s.text, s.comment)
}

func isSelect(stmt string) bool {
	return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(stmt)), "SELECT")
}

// TestReadmeDemo runs the README's "See it first" block: it builds the
// binary (into a temp dir instead of bin/) and plays the demo, with --exit
// so that it ends after the story, on a free port.
func TestReadmeDemo(t *testing.T) {
	blocks, err := readmeSection(readmePath, "See it first")
	if err != nil {
		t.Fatal(err)
	}
	b, ok := blocks["demo"]
	if !ok || len(blocks) != 1 {
		t.Fatalf("README's \"See it first\" should hold one block, marked demo; it has %d", len(blocks))
	}
	bin := filepath.Join(t.TempDir(), "fenceproxy")
	text := b.text
	for _, sb := range []struct{ old, new string }{
		{"-o bin/fenceproxy", "-o " + bin},
		{"./bin/fenceproxy demo", bin + " demo --exit --listen 127.0.0.1:0"},
	} {
		if !strings.Contains(text, sb.old) {
			t.Fatalf("README's demo block no longer contains %q: update TestReadmeDemo\n%s", sb.old, text)
		}
		text = strings.ReplaceAll(text, sb.old, sb.new)
	}
	cmd := exec.Command("sh", "-ec", text)
	cmd.Dir = ".." // the repository, where the README's commands run
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "no MariaDB or MySQL server binary") && os.Getenv(dbtest.EnvRequire) != "1" {
			t.Skip("no database server binary for the demo")
		}
		t.Fatalf("%s: %v\n%s", strings.TrimSpace(b.text), err, out)
	}
	// What the README says the demo shows: the stale write changes
	// nothing, and it is in the audit log.
	for _, want := range []string{"-> 0 rows", `"reason":"stale_token"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}

// TestReadmeQuickStartBlocks needs no server: the Quick start has every
// block the doc test runs, each statement of its SQL says what it returns,
// and its config is the safe one (backend.user set, catalog on).
func TestReadmeQuickStartBlocks(t *testing.T) {
	blocks := quickStart(t)
	for _, s := range splitSQL(blocks["sql"].text) {
		if _, _, err := expectation(s); err != nil {
			t.Errorf("README's Quick start SQL: %v", err)
		}
	}
	cfg := blocks["config"].text
	if !regexp.MustCompile(`(?m)^\s+user:\s*\S+`).MatchString(cfg) {
		t.Errorf("the Quick start config sets no backend.user:\n%s", cfg)
	}
	if strings.Contains(cfg, "refresh: 0") {
		t.Errorf("the Quick start config turns the catalog off:\n%s", cfg)
	}
}

// TestReadmeQuickStart runs README.md's Quick start against the disposable
// server: fenceproxy init, the GRANTs, the config as written (addresses,
// accounts, schema and paths substituted), check-config and serve, then the
// SQL of step 5 through the proxy with the mariadb client and with
// go-sql-driver, each result checked against the comment after it. It
// fails when a command of the README stops working.
func TestReadmeQuickStart(t *testing.T) {
	blocks := quickStart(t)
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	rootCfg, err := mysql.ParseDSN(s.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}

	// What the Quick start takes as given: the app's tables, and a view
	// over one of them (not in the README) to show that the catalog is on.
	for _, q := range []string{
		"CREATE TABLE reconciliation_runs (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL)",
		"INSERT INTO reconciliation_runs VALUES (42, 'pending')",
		"CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount DECIMAL(10,2) NOT NULL)",
		"CREATE VIEW recent_runs AS SELECT id, status FROM reconciliation_runs",
	} {
		mustExec(t, root, q)
	}

	// Accounts are server-wide: unique names, dropped at the end.
	suffix := make([]byte, 4)
	rand.Read(suffix)
	proxyUser, appUser := "fpqs_proxy_"+hex.EncodeToString(suffix), "fpqs_app_"+hex.EncodeToString(suffix)
	t.Cleanup(func() {
		for _, u := range []string{proxyUser, appUser} {
			root.Exec("DROP USER IF EXISTS '" + u + "'@'%'")
		}
	})
	m := regexp.MustCompile(`CREATE USER 'app_worker'@'%' IDENTIFIED BY '([^']*)'`).FindStringSubmatch(blocks["grants"].text)
	if m == nil {
		t.Fatalf("the Quick start's grants create no 'app_worker'@'%%' with a password:\n%s", blocks["grants"].text)
	}
	appPassword := m[1]

	dir := t.TempDir()
	binDir := filepath.Dir(buildFenceproxy(t))
	listen, admin := closedPort(t), closedPort(t)
	_, listenPort, _ := net.SplitHostPort(listen)
	auditFile := filepath.Join(dir, "audit.jsonl")

	// Each substitution must apply to the block named: a README that no
	// longer says it has changed under the test, which must change too.
	subst := []struct{ block, old, new string }{
		{"init", "admin:admin-password", rootCfg.User + ":" + rootCfg.Passwd},
		{"init", "db.internal:3306", s.Addr},
		{"config", "db.internal:3306", s.Addr},
		{"config", "127.0.0.1:6033", listen},
		{"config", "127.0.0.1:9033", admin},
		{"config", "/var/log/fenceproxy/audit.jsonl", auditFile},
		{"config", "user: fenceproxy", "user: " + proxyUser},
		// The test's own account resets the row between runs, past the proxy.
		{"config", "database_guard: triggers", "database_guard: triggers\n  database_guard_exempt: [" + rootCfg.User + "]"},
		{"grants", "'fenceproxy'@", "'" + proxyUser + "'@"},
		{"grants", "'app_worker'@", "'" + appUser + "'@"},
		{"client", "-P 6033", "-P " + listenPort},
		{"client", "-u app_worker", "-u " + appUser},
		{"client", " -p ", " --password=" + appPassword + " "},
	}
	text := map[string]string{}
	for name, b := range blocks {
		text[name] = b.text
	}
	for _, sb := range subst {
		if !strings.Contains(text[sb.block], sb.old) {
			t.Fatalf("README's Quick start block %q no longer contains %q: update TestReadmeQuickStart\n%s", sb.block, sb.old, text[sb.block])
		}
		text[sb.block] = strings.ReplaceAll(text[sb.block], sb.old, sb.new)
	}
	schema := regexp.MustCompile(`\bapp\b`)
	for _, name := range []string{"init", "grants", "config", "client"} {
		if !schema.MatchString(text[name]) {
			t.Fatalf("README's Quick start block %q no longer names the schema app: update TestReadmeQuickStart\n%s", name, text[name])
		}
		text[name] = schema.ReplaceAllString(text[name], db)
	}

	env := append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	shell := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-ec", script)
		cmd.Dir, cmd.Env = dir, env
		return cmd
	}

	// 1. the config, 2. fenceproxy init --config
	if err := os.WriteFile(filepath.Join(dir, "fenceproxy.yaml"), []byte(text["config"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := shell(text["init"]).CombinedOutput(); err != nil {
		t.Fatalf("step 1, %s: %v\n%s", strings.TrimSpace(blocks["init"].text), err, out)
	}
	for _, table := range []string{"fenced_job_leases", "fenced_audit"} {
		if got := queryString(t, root, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", db, table); got != "1" {
			t.Fatalf("fenceproxy init made no %s.%s", db, table)
		}
	}

	for _, table := range []string{"reconciliation_runs", "invoices"} {
		if got := queryString(t, root, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME LIKE 'fence\\_guard\\_%'", db, table); got != "3" {
			t.Fatalf("fenceproxy init --config made %s guard triggers on %s.%s, want 3", got, db, table)
		}
	}

	// 3. the accounts and grants, as an administrator
	admDB := dbtest.Open(t, s.RootDSN(""))
	for _, st := range splitSQL(text["grants"]) {
		if _, err := admDB.Exec(st.text); err != nil {
			t.Fatalf("step 2, %s: %v", st.text, err)
		}
	}

	// 4. check-config and serve
	serve := startReadmeServe(t, shell(text["serve"]), listen)
	eventually(t, 10*time.Second, "'fenceproxy listening' in the log", func() bool {
		return strings.Contains(serve.output(), "fenceproxy listening")
	})
	if code, body := httpGet(t, "http://"+admin+"/readyz"); code != 200 {
		t.Fatalf("step 4: /readyz (a login as backend.user) answered %d %q", code, body)
	}

	// The apps' account reads the lease table and writes nothing of it.
	appDirect := dbtest.Open(t, s.DSN(appUser, appPassword, db))
	if _, err := appDirect.Exec("UPDATE fenced_job_leases SET leased_until = leased_until"); err == nil {
		t.Error("the Quick start's app account may write the lease table")
	}
	if _, err := appDirect.Exec("SELECT COUNT(*) FROM fenced_job_leases"); err != nil {
		t.Errorf("the Quick start's app account cannot read the lease table: %v", err)
	}
	// Past the proxy, the guard triggers refuse a write without a fence.
	_, err = appDirect.Exec("UPDATE reconciliation_runs SET status = 'direct' WHERE id = 42")
	if me := (*mysql.MySQLError)(nil); !errors.As(err, &me) || me.Number != 9100 {
		t.Errorf("a direct write without a fence: %v, want the guard trigger's error 9100", err)
	}
	if got := queryString(t, root, "SELECT status FROM reconciliation_runs WHERE id = 42"); got == "direct" {
		t.Error("a direct write without a fence landed")
	}

	stmts := splitSQL(text["sql"])
	staleWrites := 0
	for _, st := range stmts {
		if want, _, _ := expectation(st); want == 0 && !isSelect(st.text) {
			staleWrites++
		}
	}
	reset := func() { mustExec(t, root, "UPDATE reconciliation_runs SET status = 'pending' WHERE id = 42") }
	runs, viewWrites := 0, 0

	// 5. the mariadb client, with the SQL on its standard input
	t.Run("mariadb client", func(t *testing.T) {
		if _, err := exec.LookPath("mariadb"); err != nil {
			if os.Getenv(dbtest.EnvRequire) == "1" {
				t.Fatal("no mariadb client on PATH")
			}
			t.Skip("no mariadb client on PATH")
		}
		reset()
		cmd := shell(text["client"])
		cmd.Stdin = strings.NewReader(text["sql"])
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		runs++
		if err != nil {
			t.Fatalf("step 5, %s: %v\n%s%s", strings.TrimSpace(blocks["client"].text), err, out, stderr.Bytes())
		}
		t.Logf("the client printed:\n%s", out)
		// Batch mode: a header line and a value line per SELECT.
		var values []string
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for i := 1; i < len(lines); i += 2 {
			values = append(values, strings.TrimSpace(lines[i]))
		}
		i := 0
		for _, st := range stmts {
			if !isSelect(st.text) {
				continue
			}
			if i >= len(values) {
				t.Fatalf("the client printed no value for %s:\n%s", st.text, out)
			}
			checkReadmeValue(t, st, values[i])
			i++
		}
	})

	// 5. the same SQL with go-sql-driver, one connection, each result checked.
	t.Run("go-sql-driver", func(t *testing.T) {
		reset()
		app := dbtest.Open(t, fmt.Sprintf("%s:%s@tcp(%s)/%s", appUser, appPassword, listen, db))
		ctx := context.Background()
		c, err := app.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		runs++
		for _, st := range stmts {
			if isSelect(st.text) {
				var v sql.NullString
				if err := c.QueryRowContext(ctx, st.text).Scan(&v); err != nil {
					t.Fatalf("%s: %v", st.text, err)
				}
				got := "NULL"
				if v.Valid {
					got = v.String
				}
				checkReadmeValue(t, st, got)
				continue
			}
			r, err := c.ExecContext(ctx, st.text)
			if err != nil {
				t.Fatalf("%s: %v", st.text, err)
			}
			want, _, err := expectation(st)
			if err != nil {
				t.Fatal(err)
			}
			if n := rowsAffected(r); n != want {
				t.Errorf("%s: %d rows changed, README says %d (%s)", st.text, n, want, st.comment)
			}
		}
		// The catalog is on: a write through a view over the protected
		// table is fenced too, and the session's lease is gone by now.
		mustExec(t, root, "GRANT SELECT, UPDATE ON `"+db+"`.recent_runs TO '"+appUser+"'@'%'")
		if r := mustExec(t, c, "UPDATE recent_runs SET status = 'via view' WHERE id = 42"); rowsAffected(r) != 0 {
			t.Error("a write through a view over the protected table was not fenced: is the catalog on?")
		}
		if got := queryString(t, root, "SELECT status FROM reconciliation_runs WHERE id = 42"); got == "via view" {
			t.Error("the stale write through the view landed")
		}
		viewWrites++
	})
	if t.Failed() {
		return
	}

	// Every stale write is in the audit file and, through backend.user, in
	// fenced_audit.
	want := staleWrites*runs + viewWrites
	records := readAuditFile(t, auditFile)
	if len(records) != want {
		t.Errorf("audit file: %d records, want %d (one per stale write):\n%v", len(records), want, records)
	}
	for _, r := range records {
		if r["reason"] == "" || r["table"] == "" {
			t.Errorf("audit record without reason or table: %v", r)
		}
	}
	eventually(t, 10*time.Second, "the stale writes in fenced_audit", func() bool {
		n, _ := strconv.Atoi(queryString(t, root, "SELECT COUNT(*) FROM fenced_audit"))
		return n == want
	})
	serve.stop(t)
}

// checkReadmeValue compares a SELECT's value with what the README's comment
// after it says.
func checkReadmeValue(t *testing.T, st sqlStatement, got string) {
	t.Helper()
	want, token, err := expectation(st)
	if err != nil {
		t.Fatal(err)
	}
	if token {
		if n, err := strconv.ParseInt(got, 10, 64); err != nil || n < 1 {
			t.Errorf("%s: %q, README says a fence token (%s)", st.text, got, st.comment)
		}
		return
	}
	if got != strconv.FormatInt(want, 10) {
		t.Errorf("%s: %q, README says %d (%s)", st.text, got, want, st.comment)
	}
}

func readAuditFile(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit file line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// readmeServe is the Quick start's serve block running in the background
// (a shell in its own process group: check-config, then serve).
type readmeServe struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

func (p *readmeServe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *readmeServe) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startReadmeServe(t *testing.T, cmd *exec.Cmd, listen string) *readmeServe {
	t.Helper()
	p := &readmeServe{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	eventually(t, 30*time.Second, "the Quick start's proxy to listen", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("step 4 ended before the proxy listened (%v):\n%s", cmd.ProcessState, p.output())
		default:
		}
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return p
}

// stop ends serve with SIGTERM, as an operator would (the shell around it
// gets the signal too), and requires the proxy's clean stop.
func (p *readmeServe) stop(t *testing.T) {
	t.Helper()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		t.Fatalf("the Quick start's proxy did not stop on SIGTERM:\n%s", p.output())
	}
	if !strings.Contains(p.output(), "fenceproxy stopped") {
		t.Errorf("the Quick start's proxy did not stop cleanly on SIGTERM:\n%s", p.output())
	}
}

// readmeRunBy names, for each marked code block of README.md, the test
// that runs it. A block of commands without a marker, or with a marker no
// test runs, fails TestReadmeEveryCommandIsRun.
var readmeRunBy = map[string]string{
	"demo":     "TestReadmeDemo",
	"init":     "TestReadmeQuickStart",
	"grants":   "TestReadmeQuickStart",
	"config":   "TestReadmeQuickStart",
	"serve":    "TestReadmeQuickStart",
	"client":   "TestReadmeQuickStart",
	"sql":      "TestReadmeQuickStart",
	"lease-go": "TestReadmeLeaseGo",
	"dev":      "TestReadmeDevelopment",
}

// TestReadmeEveryCommandIsRun needs no server: every code block of
// README.md that holds commands (sh, sql, go, yaml) carries a
// <!-- readme-test: NAME --> marker, and every name is run by a test.
// Blocks without a language (the diagram) hold no commands.
func TestReadmeEveryCommandIsRun(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	marker := ""
	for i := 0; i < len(lines); i++ {
		if m := readmeMarker.FindStringSubmatch(lines[i]); m != nil {
			marker = m[1]
			continue
		}
		f := readmeFence.FindStringSubmatch(lines[i])
		if f == nil {
			if strings.TrimSpace(lines[i]) != "" {
				marker = ""
			}
			continue
		}
		lang, open := f[2], i
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		switch {
		case lang == "":
		case marker == "":
			t.Errorf("README.md:%d: a %s block without a <!-- readme-test: NAME --> marker: every command of the README is run by a test", open+1, lang)
		case readmeRunBy[marker] == "":
			t.Errorf("README.md:%d: block %q is run by no test: add it to readmeRunBy and a test", open+1, marker)
		}
		marker = ""
	}
}

// TestReadmeLeaseGo needs no server: the README's Go example compiles
// against the lease package as it is (in a package of its own, given the
// variables the example assumes).
func TestReadmeLeaseGo(t *testing.T) {
	blocks, err := readmeSection(readmePath, "Leases")
	if err != nil {
		t.Fatal(err)
	}
	b, ok := blocks["lease-go"]
	if !ok {
		t.Fatal("README's Leases section has no block marked lease-go")
	}
	src := `package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

func runInvoices(context.Context) error { return nil }

func main() {
	var db *sql.DB
	ctx := context.Background()
` + b.text + `	_, _, _ = err, jobCtx, time.Second
}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// An overlay puts the file into the module without writing there.
	overlay := filepath.Join(dir, "overlay.json")
	pkg := filepath.Join(root, "internal", "readmelease")
	js, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): file}})
	if err := os.WriteFile(overlay, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "./internal/readmelease")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md:%d: the Go example does not compile: %v\n%s\n%s", b.line, err, out, src)
	}
}

// TestReadmeDevelopment needs no server: the make targets the README's
// Development block names exist (make -n: what they would run, without
// running the whole suite, which is the lead's CI run).
func TestReadmeDevelopment(t *testing.T) {
	blocks, err := readmeSection(readmePath, "Development")
	if err != nil {
		t.Fatal(err)
	}
	b, ok := blocks["dev"]
	if !ok {
		t.Fatal("README's Development section has no block marked dev")
	}
	if strings.TrimSpace(b.text) != "make build && make test" {
		t.Fatalf("README's Development block changed: update TestReadmeDevelopment\n%s", b.text)
	}
	cmd := exec.Command("make", "-n", "build", "test")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build test: %v\n%s", err, out)
	}
	for _, want := range []string{"go build -o bin/fenceproxy ./cmd/fenceproxy", "./scripts/test.sh"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make -n build test no longer runs %q:\n%s", want, out)
		}
	}
}

// TestReadmeIsTheFrontDoor: README.md stays the front door (what, demo,
// install, quick start, how it works, leases, operations and limits in
// brief, links) of at most 400 lines, with no issue numbers; the rest
// belongs in docs/ by reader.
func TestReadmeIsTheFrontDoor(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > 400 {
		t.Errorf("README.md has %d lines, at most 400: move details to docs/", n)
	}
	issue := regexp.MustCompile(`(?i)\bissue #?[0-9]+`)
	for _, dir := range []string{readmePath, "../docs"} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
				return err
			}
			text, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if m := issue.Find(text); m != nil {
				t.Errorf("%s names %q: docs state decisions, not the tracker's history", p, m)
			}
			return nil
		})
	}
}
