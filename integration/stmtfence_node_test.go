package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
)

// TestNodeMysql2StatementFence runs the documentation's mysql2 example
// (docs/examples/fence-comment-mysql2.js) through the proxy: a pool whose
// statements carry their fence in a comment, over a connection whose
// session holds a stale fence. It needs node and npm (mysql2 is installed
// into a temporary directory).
func TestNodeMysql2StatementFence(t *testing.T) {
	dir := installMysql2(t)
	script, err := filepath.Abs("../docs/examples/fence-comment-mysql2.js")
	if err != nil {
		t.Fatal(err)
	}
	e := newFencedEnv(t, envOptions{})
	host, port := splitHostPort(t, e.proxy.Addr)
	cmd := exec.Command("node", script, host, port, dbserver.AppUser, dbserver.AppPassword, e.db)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	if got := string(bytes.TrimSpace(out)); got != `{"valid":4,"stale":0}` {
		t.Fatalf("mysql2 example: %s", got)
	}
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer LIKE 'node%' AND amount = 1"); got != "4" {
		t.Fatalf("rows: %s", got)
	}
}
