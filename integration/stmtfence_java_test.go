package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// connectorJ is MariaDB Connector/J as Debian's libmariadb-java installs it.
const connectorJ = "/usr/share/java/mariadb-java-client.jar"

// TestJavaFenceComment compiles the documentation's Java comment builder
// (docs/examples/FenceComment.java, which the Hibernate StatementInspector
// example calls) with a small JDBC program and runs it with MariaDB
// Connector/J through the proxy on MariaDB, over the text protocol and with
// server-side prepared statements: writes under the valid fence land over a
// session holding the stale one, writes under the stale fence change no row
// over a session holding the valid one and are audited stale, and no owner
// reaches the general log. Hibernate itself is not run (not installable
// here).
func TestJavaFenceComment(t *testing.T) {
	needDebianTool(t, "javac", "default-jdk-headless", exec.Command("javac", "-version"))
	needDebianTool(t, "MariaDB Connector/J", "libmariadb-java", exec.Command("test", "-r", connectorJ))
	var srcs []string
	for _, p := range []string{"../docs/examples/FenceComment.java", "testdata/FenceCommentJdbc.java", "testdata/FenceCommentPrint.java"} {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, abs)
	}
	classes := t.TempDir()
	start := time.Now()
	if out, err := exec.Command("javac", append([]string{"-Xlint:all", "-Werror", "-d", classes}, srcs...)...).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	t.Logf("javac: %v", time.Since(start).Round(time.Millisecond))
	// The comment, byte for byte as the Go lease package writes it.
	checkComments(t, exec.Command("java", "-cp", classes, "FenceCommentPrint"), " ")

	e := newFencedEnv(t, envOptions{})
	ctx := context.Background()
	acquire := func(owner string) lease.Lease {
		l, err := e.store.Acquire(ctx, "invoice:java/é", time.Minute, lease.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	stale := acquire("stale owner '%25\x00\xff" + fmt.Sprint(time.Now().UnixNano()))
	if err := e.store.Release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	valid := acquire("valid\"owner\\é:" + fmt.Sprint(time.Now().UnixNano())) // the takeover
	read := generalLog(t, e)
	host, port := splitHostPort(t, e.proxy.Addr)
	cmd := exec.Command("java", "-cp", classes+string(os.PathListSeparator)+connectorJ, "FenceCommentJdbc",
		host, port, dbserver.AppUser, dbserver.AppPassword, e.db, valid.Name,
		hex.EncodeToString([]byte(stale.Owner)), fmt.Sprint(stale.Token), hex.EncodeToString([]byte(valid.Owner)), fmt.Sprint(valid.Token))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v\n%s%s", err, out, stderr.String())
	}
	log := read()
	// Per connection: two INSERTs and an UPDATE of both rows (4), then
	// three stale writes (0).
	if got := string(bytes.TrimSpace(out)); got != `{"valid":8,"stale":0}` {
		t.Fatalf("JDBC program: %s\n%s", got, stderr.String())
	}
	if got := queryString(t, e.root, "SELECT CONCAT(COUNT(*), ' ', SUM(amount)) FROM invoices WHERE customer LIKE 'java%'"); got != "4 8.00" {
		t.Errorf("rows (count, total amount): %s, want 4 8.00", got)
	}
	n := 0
	for _, r := range e.auditRecords(t) {
		if r.Lease != stale.Name || r.PresentedToken == nil || *r.PresentedToken != stale.Token || r.PresentedOwner != lease.OwnerHash(stale.Owner) || r.Reason != audit.StaleToken {
			t.Errorf("audit record not the stale comment's: %+v", r)
		}
		n++
	}
	if n != 6 {
		t.Errorf("%d audit records, want 6 (three stale writes per connection)", n)
	}
	for _, l := range []lease.Lease{stale, valid} {
		checkNoOwner(t, "general log", log, l)
	}
}
