package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
)

// TestNodeMysql2 runs the same script with Node's mysql2 driver directly and
// through the proxy: text and prepared queries, multiple statements, change
// user, and a lease taken and used with the SQL lease functions. It needs
// node and npm (mysql2 is installed into a temporary directory).
func TestNodeMysql2(t *testing.T) {
	dir := installMysql2(t)
	script := filepath.Join(dir, "t.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newFencedEnv(t, envOptions{})
	run := func(addr string, fenced bool) string {
		t.Helper()
		mustExec(t, e.root, "TRUNCATE TABLE notes") // same insert ids both ways
		host, port := splitHostPort(t, addr)
		mode := "plain"
		if fenced {
			mode = "fenced"
		}
		cmd := exec.Command("node", script, host, port, dbserver.AppUser, dbserver.AppPassword, e.db, mode)
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node (%s): %v\n%s", addr, err, out)
		}
		return string(bytes.TrimSpace(out))
	}
	direct, proxied := run(e.srv.Addr, false), run(e.proxy.Addr, false)
	if direct != proxied {
		t.Fatalf("mysql2 sees the proxy differently:\ndirect %s\nproxy  %s", direct, proxied)
	}
	if got := run(e.proxy.Addr, true); got != `{"token":1,"valid":1,"stale":0}` {
		t.Fatalf("fenced run: %s", got)
	}
}

const nodeScript = `
const mysql = require('mysql2/promise');
const [host, port, user, password, database, mode] = process.argv.slice(2);
(async () => {
  const c = await mysql.createConnection({host, port: +port, user, password, database, multipleStatements: true});
  if (mode === 'fenced') {
    const [[a]] = await c.query("SELECT fence_acquire('invoice:node', 30) AS t");
    const [ok] = await c.execute("INSERT INTO invoices (customer, period, amount) VALUES (?, ?, ?)", ['node', '2026-11', 1]);
    await c.query("SET @fence_token = @fence_token - 1");
    const [stale] = await c.execute("UPDATE invoices SET amount = ? WHERE customer = ?", [2, 'node']);
    console.log(JSON.stringify({token: a.t, valid: ok.affectedRows, stale: stale.affectedRows}));
    await c.end();
    return;
  }
  const out = {};
  [out.text] = await c.query('SELECT 1 AS one, ? AS two, NULL AS n, 1.5 AS d', ['x']);
  [out.prepared] = await c.execute('SELECT ? + 1 AS p, CONCAT(?, ?) AS s', [41, 'a', 'b']);
  [out.multi] = await c.query('SELECT 1 AS a; SELECT 2 AS b');
  const [ins] = await c.query("INSERT INTO notes (body) VALUES ('from node')");
  out.insert = {affectedRows: ins.affectedRows, insertId: ins.insertId, warningStatus: ins.warningStatus};
  try { await c.query('SELEKT 1'); } catch (e) { out.err = [e.errno, e.sqlState]; }
  await c.changeUser({user, password, database});
  [out.user] = await c.query('SELECT CURRENT_USER() AS u, DATABASE() AS db');
  console.log(JSON.stringify(out));
  await c.end();
})().catch(e => { console.error('ERR', e.message); process.exit(1); });
`

// installMysql2 installs Node's mysql2 driver into a temporary directory
// and returns it; the test is skipped with -short, without node or npm, or
// when the registry cannot be reached.
func installMysql2(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("installs mysql2 from npm")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	if out, err := exec.Command("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "mysql2@3").CombinedOutput(); err != nil {
		t.Skipf("npm install mysql2 (no registry?): %v\n%s", err, out)
	}
	return dir
}
